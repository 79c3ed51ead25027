"""The counting proxy: forwards /v1/* unchanged and logs one line per call with the server's own counts."""
from __future__ import annotations

import json

import httpx

from ctxbench.bench.counting_proxy import read_log, reply_usage, request_format, serve, summarize, upstream_root
from ctxbench.bench.loopback_server import serve as loopback


def chat(url: str, text: str, **extra) -> httpx.Response:
    body = {"model": "loopback", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(url + "/chat/completions", json=body, timeout=10)


def test_calls_are_forwarded_unchanged_and_logged_per_side(tmp_path):
    log = tmp_path / "calls.jsonl"
    with loopback(delay_s=0.0, slots=2) as up, serve(up.base_url, log, side="ours") as a, \
            serve(up.base_url, log, side="theirs") as b:
        direct = chat(up.base_url, "one two three four").json()
        via = chat(a.base_url, "one two three four").json()
        schema = {"type": "object", "properties": {"facts": {"type": "array"}}}
        chat(b.base_url, "alpha beta", response_format={"type": "json_schema", "json_schema": {"schema": schema}})
        chat(b.base_url, "alpha beta", response_format={"type": "json_object"})
        assert httpx.get(a.base_url + "/models").json()["data"][0]["id"] == "loopback"
        assert up.requests == 4 and (a.calls, b.calls) == (2, 2)
    assert via["choices"] == direct["choices"] and via["usage"] == direct["usage"]
    lines = read_log(log)
    assert [(ln["side"], ln["method"], ln["status"]) for ln in lines] == [
        ("ours", "POST", 200), ("theirs", "POST", 200), ("theirs", "POST", 200), ("ours", "GET", 200)]
    assert (lines[0]["prompt_tokens"], lines[0]["completion_tokens"], lines[0]["response_format"]) == (4, 3, None)
    assert [(ln["response_format"], ln["schema"]) for ln in lines[1:3]] == [("json_schema", True), ("json_object", False)]
    sides = summarize(lines)  # the GET is not a chat call
    assert sides["ours"]["calls"] == 1 and sides["ours"]["prompt_tokens"] == 4
    assert (sides["theirs"]["calls"], sides["theirs"]["structured"], sides["theirs"]["prompt_tokens"]) == (2, 2, 4)


def test_an_error_reply_is_relayed_with_its_body_logged(tmp_path):
    def refuse(body):
        if (body.get("response_format") or {}).get("type") == "json_schema":
            raise ValueError("Input should be 'text' or 'json_object'")
        return "ok"

    log = tmp_path / "calls.jsonl"
    with loopback(delay_s=0.0, reply=refuse) as up, serve(up.base_url + "/", log, side="s") as p:
        r = chat(p.base_url, "x", response_format={"type": "json_schema", "json_schema": {"schema": {}}})
        assert r.status_code == 500 and "json_object" in r.json()["error"]["message"]
        assert httpx.post(p.base_url.replace("/v1", "") + "/other", json={}).status_code == 404  # not forwarded
    (line,) = read_log(log)
    assert line["status"] == 500 and line["prompt_tokens"] is None and "Input should be" in line["error"]
    assert summarize([line])["s"]["errors"] == 1


def test_an_unreachable_upstream_is_a_logged_502(tmp_path):
    with loopback() as gone:
        url = gone.base_url  # a port that was just free: nothing listens once the server closed
    log = tmp_path / "calls.jsonl"
    with serve(url, log, timeout_s=5) as p:
        r = chat(p.base_url, "x")
    assert r.status_code == 502 and "gave no reply" in r.json()["error"]["message"]
    assert read_log(log)[0]["status"] == 502


def test_helpers_read_formats_usage_and_time_windows():
    assert upstream_root("http://h:1/v1/") == upstream_root("http://h:1") == "http://h:1"
    assert request_format(b'{"response_format": {"type": "json_object", "schema": {"type": "object"}}}') == \
        ("json_object", True)
    assert request_format(b"not json") == (None, False)
    stream = b'data: {"choices": []}\n\ndata: {"usage": {"prompt_tokens": 7, "completion_tokens": 2}}\n\ndata: [DONE]\n'
    assert reply_usage(stream) == (7, 2) and reply_usage(b"{}") == (None, None)
    lines = [{"side": "a", "t": t, "method": "POST", "path": "/v1/chat/completions", "status": 200,
              "prompt_tokens": 1, "completion_tokens": 1, "response_format": None, "seconds": 0.5} for t in (1, 2, 3)]
    assert summarize(lines, since=2, until=3)["a"]["calls"] == 1
    assert json.loads(json.dumps(summarize(lines)))["a"]["seconds"] == 1.5
