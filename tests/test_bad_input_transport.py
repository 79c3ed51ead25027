"""llm=openai at the network boundary: every broken reply is a failed call with a one-line reason.

A raw socket server (tests/local_http.py ``RawServer``) sends what a broken or hostile server
would: a body cut short of its Content-Length, garbage, HTML, JSON of the wrong shape, a redirect,
a body trickled byte by byte, a reply far too large. Each must end as ``ChatResult(failed=True)``
(retried first when a retry may help), counted by the consecutive-failure breaker — never a
traceback — and ``preflight()`` must not crash on any of them.
"""
from __future__ import annotations

import gzip
import json
import time

import pytest

from ctxbench.llm.base import LLMUnavailable
from ctxbench.llm.openai_compat import REPLY_BYTES
from tests.test_llm_failures import MSGS, make_llm, reply

from local_http import RawServer, servers


def http(body: bytes, status: str = "200 OK", ctype: str = "application/json", extra: str = "",
         length: int | None = None) -> bytes:
    """One raw HTTP/1.1 reply; ``length`` overrides the Content-Length header (a lie)."""
    n = len(body) if length is None else length
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {n}\r\n{extra}"
            "Connection: close\r\n\r\n").encode() + body


def cut(sock, n):
    sock.sendall(http(b'{"choi', length=500))  # headers say 500 bytes, 6 are sent, then close


def trickle(sock, n):
    sock.sendall(http(b"", length=500))
    for _ in range(40):
        sock.sendall(b" ")
        time.sleep(0.1)


def fixed(payload: bytes):
    return lambda sock, n: sock.sendall(payload)


def huge_declared(sock, n):
    sock.sendall(http(b"", length=REPLY_BYTES + 1))
    sock.sendall(b"{" * 1024)


def huge_chunked(sock, n):
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    block = b" " * (1 << 20)
    for _ in range((REPLY_BYTES >> 20) + 2):
        sock.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
    sock.sendall(b"0\r\n\r\n")


def choice(content) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


# (name, responder, the reason recorded, retried?)
CASES = [
    ("cut mid-reply", cut, "peer closed connection without sending complete message body", True),
    ("not JSON", fixed(http(b"hello")), "malformed reply (not JSON)", True),
    ("empty 200", fixed(http(b"")), "malformed reply (empty)", True),
    ("HTML 200", fixed(http(b"<html><body>Bad gateway</body></html>", ctype="text/html")),
     "malformed reply (not JSON, Content-Type: text/html)", True),
    ("JSON list", fixed(http(b"[1, 2]")), "malformed reply (a JSON list, not an object)", True),
    ("no choices", fixed(http(b'{"id": "x"}')), "malformed reply (no 'choices' in it)", True),
    ("choices not a list", fixed(http(b'{"choices": {"a": 1}}')), "'choices' is a object, not a list", True),
    ("choices empty", fixed(http(b'{"choices": []}')), "malformed reply ('choices' is empty)", True),
    ("choice a string", fixed(http(b'{"choices": ["x"]}')), "choices[0] is a string, not an object", True),
    ("content a number", fixed(http(choice(5))), "content is a number, not a string", True),
    ("content a list", fixed(http(choice(["a"]))), "content is a list, not a string", True),
    ("nested too deeply", fixed(http(b"[" * 200000 + b"]" * 200000)), "JSON nested too deeply", True),
    ("garbage gzip", fixed(http(b"\x1f\x8b not gzip at all", extra="Content-Encoding: gzip\r\n")),
     "unreadable reply: DecodingError", True),
    ("garbage status line", fixed(b"SPAM\r\n\r\n"), "connection error", True),
    ("redirect", fixed(http(b"", status="302 Found", extra="Location: https://elsewhere.example/v1\r\n")),
     "HTTP 302 redirect to https://elsewhere.example/v1 (redirects are not followed", False),
    ("trickled body", trickle, "the reply was not complete within 1 s", True),
    ("huge declared", huge_declared, f"reply too large (Content-Length {REPLY_BYTES + 1} bytes", False),
    ("huge chunked", huge_chunked, "reply too large (over the 32 MiB limit)", False),
]


@pytest.fixture
def raw():
    with servers(RawServer) as make:
        yield make


def fast_llm(url, monkeypatch, **kw):
    return make_llm(url, monkeypatch, timeout_s=1, max_retries=2, backoff_s=0.01, backoff_max_s=0.02,
                    max_consecutive_failures=0, **kw)


@pytest.mark.parametrize("name,respond,reason,retried", CASES, ids=[c[0] for c in CASES])
def test_a_broken_reply_is_a_failed_call_with_a_one_line_reason(raw, monkeypatch, name, respond, reason, retried):
    s = raw(respond)
    r = fast_llm(s.url, monkeypatch).chat(MSGS)
    assert r.failed and r.text == ""
    assert reason in r.error and "\n" not in r.error and len(r.error) < 500, r.error
    assert s.requests == (3 if retried else 1)  # max_retries=2: three tries, or one for a hopeless reply


@pytest.mark.parametrize("name,respond,reason,retried", CASES, ids=[c[0] for c in CASES])
def test_preflight_survives_a_broken_models_reply(raw, monkeypatch, name, respond, reason, retried):
    s = raw(respond)
    fast_llm(s.url, monkeypatch, preflight_timeout_s=1).preflight()  # the calls will tell
    assert s.requests == 1


def test_a_cut_reply_is_retried_and_the_retry_answers(raw, monkeypatch):
    s = raw(lambda sock, n: cut(sock, n) if n == 0 else sock.sendall(http(reply("In France"))))
    r = fast_llm(s.url, monkeypatch).chat(MSGS)  # before any success, too: a cut is not "unreachable"
    assert (r.text, r.failed, s.requests) == ("In France", False, 2)


def test_cut_replies_are_counted_by_the_breaker(raw, monkeypatch):
    s = raw(cut)
    llm = make_llm(s.url, monkeypatch, timeout_s=1, max_retries=1, backoff_s=0.01, backoff_max_s=0.02,
                   max_consecutive_failures=2)
    assert llm.chat(MSGS).failed
    with pytest.raises(LLMUnavailable, match="2 calls in a row failed .*last error: connection error") as e:
        llm.chat(MSGS)
    assert "\n" not in str(e.value) and s.requests == 4


def test_a_trickled_reply_is_cut_off_near_the_timeout(raw, monkeypatch):
    s = raw(trickle)
    llm = make_llm(s.url, monkeypatch, timeout_s=0.5, max_retries=0)
    t = time.perf_counter()
    r = llm.chat(MSGS)
    assert r.failed and "not complete within 0.5 s" in r.error
    assert time.perf_counter() - t < 2.0  # not the 4 s the server takes (each byte is within the read timeout)


def test_negative_or_bool_usage_counts_are_not_believed(raw, monkeypatch, capsys):
    body = {"choices": [{"message": {"content": "In France"}}],
            "usage": {"prompt_tokens": -5, "completion_tokens": True}}
    s = raw(fixed(http(json.dumps(body).encode())))
    llm = fast_llm(s.url, monkeypatch)
    r = llm.chat(MSGS)
    assert not r.failed and r.prompt_tokens > 0 and r.completion_tokens == 3  # ~4 characters a token
    llm.chat(MSGS)
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert r.token_source == "estimate"  # model 'm': no tokenizer is known for it
    assert len(warned) == 2 and warned[0].startswith("warning: llm=openai: no tokenizer for model 'm'")  # once each
    assert warned[1] == ('warning: llm=openai: the server reported usage {"prompt_tokens": -5, "completion_tokens": '
                         'true}, not token counts; counting them here instead (ChatResult.token_source says how)')


@pytest.mark.parametrize("status,body,what", [
    ("500 Internal Server Error", b"oops", "answered HTTP 500"),
    ("404 Not Found", b"", "answered HTTP 404"),
    ("200 OK", b"<html>", "answered with a body that is not a model list"),
    ("200 OK", b'{"data": []}', "listed no models"),
])
def test_preflight_says_when_it_cannot_check_the_model(raw, monkeypatch, capsys, status, body, what):
    """The run goes on (the calls will tell), but not silently: one warning line naming the check."""
    s = raw(fixed(http(body, status=status)))
    fast_llm(s.url, monkeypatch).preflight()
    assert capsys.readouterr().err.strip() == (f"warning: llm=openai: GET {s.url}/models {what}; cannot check that "
                                              "llm.model='m' is served (llm.check_model_listed=false skips the check)")
    fast_llm(s.url, monkeypatch, check_model_listed=False).preflight()
    assert capsys.readouterr().err == ""


def test_a_gzip_bomb_is_bounded(raw, monkeypatch):
    bomb = gzip.compress(b" " * (REPLY_BYTES + (1 << 20)), compresslevel=9)  # ~34 KiB on the wire
    s = raw(fixed(http(bomb, extra="Content-Encoding: gzip\r\n")))
    r = fast_llm(s.url, monkeypatch).chat(MSGS)
    assert r.failed and "reply too large" in r.error and s.requests == 1
