"""The sweep's "faults" cases for what an LLM server sends back (issue 37): malformed replies, empty
replies, another model than the one asked for, a key echoed back, a password in ``llm.base_url``.

Each mode is a function of the fake server's request handler (``tests/bad_input/harness.py`` answers a
chat request to ``/<mode>/v1`` with ``REPLIES[mode]`` when there is one). What the user must see:

- a malformed reply (text that is not valid Unicode, header values that only look numeric, missing
  ``choices``, content that is not a string) is a failed call — the run ends in one line, never a traceback;
- usage counts that are not plain ints (a string, a float, a bool, an absurd number) are not believed:
  one warning, the run goes on;
- empty replies (a reasoning model out of budget) are failed calls: the run ends in one line saying
  "empty replies";
- another served model is recorded in results.json ``llm.served_models`` and warned about once (a dated
  snapshot of the requested name is recorded, not warned about);
- a key echoed in a reply, or the password of ``llm.base_url``, is written to no file of the run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from bad_input.cases import EVAL, FAST_RETRY, Case

KEY = "Zq7-not-a-known-shape-4431"  # held by a variable whose name does not look secret: scrubbed by value
KEY_ENV = "SWEEP_LLM_CREDS"
URL_PASSWORD = "pw-in-the-url-9137"
SNAPSHOT = "fake-2024-07-18"  # a dated snapshot of llm.model=fake


def body(content: Any = "7 May 2023", **over: Any) -> dict:
    """A chat completion (the harness's), with top-level fields replaced."""
    from bad_input.harness import chat_body

    return {**chat_body(content), **over}


def reply(obj: Any = None, **over: Any) -> Callable[[Any], None]:
    """A mode answering 200 with ``obj`` (default: :func:`body` with ``over``)."""
    return lambda h: h._send(200, body(**over) if obj is None else obj)


def raw(status: str, headers: dict[str, str], payload: bytes = b"") -> Callable[[Any], None]:
    """A mode answering byte for byte (header values http.server would refuse go as UTF-8)."""
    def send(h: Any) -> None:
        h.send_raw(status, {"Content-Type": "application/json", "Content-Length": str(len(payload)), **headers},
                   payload)
    return send


def retry_after(value: str) -> Callable[[Any], None]:
    return raw("429 Too Many Requests", {"Retry-After": value}, b'{"error": {"message": "slow down"}}')


def usage(**counts: Any) -> Callable[[Any], None]:
    return lambda h: h._send(200, body(usage={"prompt_tokens": 10, "completion_tokens": 3, **counts}))


def echo_key(h: Any) -> None:
    """The key the client sent, echoed inside a successful reply."""
    key = str(h.headers.get("Authorization", "")).removeprefix("Bearer ")
    h._send(200, body(f"7 May 2023 (your key is {key})"))


def empty(content: Any) -> Callable[[Any], None]:
    """A reasoning model out of its token budget: no content, its reasoning spent, finish_reason length."""
    choice = {"index": 0, "finish_reason": "length",
              "message": {"role": "assistant", "content": content, "reasoning_content": "Let me think. The"}}
    return reply(choices=[choice])


def length_header(value: str) -> Callable[[Any], None]:
    """A good reply whose Content-Length is ``value``."""
    return lambda h: raw("200 OK", {"Content-Length": value}, json.dumps(body()).encode())(h)


REPLIES: dict[str, Callable[[Any], None]] = {
    "f_content_surrogate": reply(choices=[{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": "7 May \ud800 2023"}}]),
    "f_retry_after_superscript": retry_after("²"),
    "f_retry_after_arabic": retry_after("١٢"),
    "f_retry_after_exponent": retry_after("1e3"),
    "f_retry_after_inf": retry_after("inf"),
    "f_retry_after_negative": retry_after("-5"),
    "f_content_length_arabic": length_header("١٢"),
    "f_choices_missing": reply({k: v for k, v in body().items() if k != "choices"}),
    "f_content_list": reply(choices=[{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": ["7 May 2023"]}}]),
    "f_usage_huge": usage(prompt_tokens=10 ** 30),
    "f_usage_string": usage(prompt_tokens="12"),
    "f_usage_float": usage(completion_tokens=1.5),
    "f_usage_bool": usage(completion_tokens=True),
    "f_empty_content": empty(""),
    "f_null_content_reasoning": empty(None),
    "f_served_other": reply(model="some-other-model"),
    "f_served_snapshot": reply(model=SNAPSHOT),
    "f_echo_key": echo_key,
}
MODES = {mode: "chat: " + mode[2:].replace("_", " ") for mode in REPLIES}

FAILED = ("fail", "llm", "reply", "server")  # a clear error names one of these


def run_files(work: Path) -> list[Path]:
    """Every file the eval run wrote, the call cache included."""
    return [p for p in work.rglob("*") if p.is_file()]


def nowhere(secret: str) -> Callable[[str, Path], bool]:
    """A recovery check: the run answered its 2 questions and ``secret`` is in none of its files nor its output."""
    def check(out: str, work: Path) -> bool:
        pred = work / "run" / "predictions.jsonl"
        answered = pred.exists() and sum(1 for ln in pred.read_text().splitlines() if ln.strip()) == 2
        return answered and secret not in out and not any(secret.encode() in p.read_bytes()
                                                         for p in run_files(work))
    return check


def served(models: dict[str, int], warned: bool) -> Callable[[str, Path], bool]:
    """A recovery check: results.json records ``models`` as served, and the output warns (or not)."""
    def check(out: str, work: Path) -> bool:
        res = work / "run" / "results.json"
        got = json.loads(res.read_text())["llm"]["served_models"] if res.exists() else None
        return got == models and ("the server answered with" in out) == warned
    return check


WARNED_USAGE = r"warning: llm=openai: the server reported usage .*not token counts"


def cases() -> list[Case]:
    base = EVAL + ["dataset=locomo_sample"] + FAST_RETRY + ["llm.max_retries=1"]
    out = []
    for mode, desc in MODES.items():
        kw: dict[str, Any] = {"expect": FAILED}
        if mode.startswith("f_usage_"):
            kw = {"ok_if_success": True, "recovery": WARNED_USAGE}
        elif mode in ("f_empty_content", "f_null_content_reasoning"):
            kw = {"expect": ("empty replies",) if mode == "f_empty_content" else FAILED}
        elif mode == "f_served_other":
            kw = {"ok_if_success": True, "must_recover": True, "recovery": served({"some-other-model": 2}, True)}
        elif mode == "f_served_snapshot":
            kw = {"ok_if_success": True, "must_recover": True, "recovery": served({SNAPSHOT: 2}, False)}
        elif mode == "f_echo_key":
            kw = {"ok_if_success": True, "must_recover": True, "recovery": nowhere(KEY), "env": {KEY_ENV: KEY}}
        argv = [a for a in base if a != "llm.api_key_env=null"] + [f"llm.api_key_env={KEY_ENV}"] \
            if mode == "f_echo_key" else base
        out.append(Case(f"faults.{mode[2:]}", "faults", desc, argv, server=mode, timeout=90, **kw))
    out.append(Case("faults.url_password", "faults", "llm.base_url with user:password@ (written to no file)",
                    [a.replace("llm.base_url={url}", f"llm.base_url=http://sweep:{URL_PASSWORD}@{{host}}/ok/v1")
                     for a in base], ok_if_success=True, must_recover=True, recovery=nowhere(URL_PASSWORD)))
    out.append(Case("faults.server_control", "faults", "a well-behaved server (control)", base, control=True))
    return out
