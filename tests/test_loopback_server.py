"""The loopback OpenAI-compatible server: N parallel slots, a fixed delay, replies fixed by the request."""
from __future__ import annotations

import json
import statistics
import time

import httpx
import pytest
from omegaconf import OmegaConf

from ctxbench.bench.loopback_server import LoopbackServer, default_reply, serve
from ctxbench.llm.openai_compat import OpenAIChatLLM
from ctxbench.config.compose import option_config


def client(url: str, **kw) -> OpenAIChatLLM:
    cfg = {"name": "openai", "model": "loopback", "base_url": url, "api_key_env": None, "cache": False,
           "concurrency": 4, **kw}
    return OpenAIChatLLM(option_config("llm", cfg))


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


def test_slots_bound_the_calls_served_at_once():
    batch = [ask(f"question number {i} about Paris") for i in range(4)]
    with serve(delay_s=0.2, slots=2) as s:
        llm = client(s.base_url)
        t = time.perf_counter()
        rs = llm.chat_batch(batch)
        wall = time.perf_counter() - t
        assert (s.requests, s.peak_in_flight, s.in_flight) == (4, 2, 0)  # 4 sent at once, 2 served at a time
    assert 0.38 < wall < 3.0  # two rounds of 0.2 s, not one
    assert [r.text for r in rs] == [f"{i} about Paris" for i in range(4)]
    assert all(not r.failed and r.token_source == "server" for r in rs)
    assert rs[0].prompt_tokens == 2 + 5 and rs[0].completion_tokens == 3  # whitespace words


def test_more_slots_serve_all_at_once():
    with serve(delay_s=0.2, slots=4) as s:
        client(s.base_url).chat_batch([ask(f"q {i}") for i in range(4)])
        assert (s.requests, s.peak_in_flight) == (4, 4)


def test_the_reply_depends_on_the_messages_only():
    with serve(delay_s=0.0, slots=3) as s:
        llm = client(s.base_url)
        batch = [ask("one two three four"), ask("alpha beta"), ask("one two three four")] * 3
        first = [r.text for r in llm.chat_batch(batch)]
        again = [r.text for r in llm.chat_batch(list(reversed(batch)))]
    assert first == ["two three four", "alpha beta", "two three four"] * 3
    assert again == list(reversed(first))  # the order of completion changes nothing


def test_preflight_passes_and_lists_loopback():
    with serve() as s:
        client(s.base_url).preflight()
        models = httpx.get(s.base_url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["loopback"]


def test_structured_calls_get_an_empty_object_and_max_tokens_cuts():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    with serve(delay_s=0.0) as s:
        llm = client(s.base_url)
        r = llm.chat(ask("anything"), schema=schema)
        assert r.text == "{}" and json.loads(r.text) == {}
        cut = llm.chat(ask("w1 w2 w3 w4 w5"), max_new_tokens=2)
    assert cut.text == "w3 w4" and cut.truncated and cut.completion_tokens == 2


def test_a_custom_reply_and_its_failure():
    def reply(body):
        if "boom" in body["messages"][-1]["content"]:
            raise RuntimeError("no")
        return body["messages"][-1]["content"].upper()

    with serve(delay_s=0.0, reply=reply) as s:
        llm = client(s.base_url, max_retries=0)
        assert llm.chat(ask("paris")).text == "PARIS"
        bad = llm.chat(ask("boom"))
    assert bad.failed and "HTTP 500" in bad.error and "reply failed: RuntimeError" in bad.error


def test_it_is_quiet_and_rejects_bad_requests(capfd):
    from ctxbench.models.loading import smollm2_dir

    with serve(delay_s=0.0) as s:
        assert httpx.post(s.base_url + "/chat/completions", content=b"[1]").status_code == 400
        assert httpx.post(s.base_url + "/nowhere", content=b"{}").status_code == 404
        client(s.base_url, tokenizer=str(smollm2_dir())).chat(ask("x"))  # a tokenizer: no estimate warning
    assert capfd.readouterr().err == ""  # no line per request


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="slots=0"):
        LoopbackServer(slots=0)
    assert default_reply({"messages": [{"role": "user", "content": ""}]}) == "ok"


def test_no_hidden_latency_per_call_or_per_connection():
    """The server adds nothing to ``delay_s``: no ~40 ms Nagle/delayed-ACK stall per reply (headers
    and body are two writes), no 1 s SYN retransmit when a burst of new connections overflows a
    small listen backlog. Bounds are loose (a shared machine); the stalls they catch are not."""
    with serve(delay_s=0.0, slots=1) as s:
        llm = client(s.base_url, concurrency=1)
        took = []
        for i in range(40):
            t = time.perf_counter()
            llm.chat(ask(f"q {i}"))
            took.append(time.perf_counter() - t)
        assert statistics.median(took) < 0.03, took  # a Nagle stall costs every reply ~40 ms; a loaded core, a few
    with serve(delay_s=0.05, slots=16) as s:
        llm = client(s.base_url, concurrency=16)
        t = time.perf_counter()
        llm.chat_batch([ask(f"q {i}") for i in range(16)])  # 16 new connections at once
        assert time.perf_counter() - t < 0.9 and s.peak_in_flight == 16
