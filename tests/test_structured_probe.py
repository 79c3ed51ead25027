"""``llm.response_format=auto``: the probe finds what an OpenAI-compatible server enforces, against loopback
servers that behave like OpenAI, llama-cpp-python, older vLLM, a JSON-mode-only server, a text-only one and one
that accepts a schema and ignores it; the override skips the probe; a deterministic refusal is not retried."""
from __future__ import annotations

import json
import pytest

from ctxbench.bench.loopback_server import HTTPError, default_reply, serve
from ctxbench.config.compose import option_config
from ctxbench.llm.base import LLMUnavailable
from ctxbench.llm.cache import CachedLLM, maybe_cached
from ctxbench.llm.openai_compat import OpenAIChatLLM
from ctxbench.llm.schema import parse_reply
from ctxbench.llm.structured_modes import LABELS, PROBE_SCHEMA
from tests.conftest import run_cli
from tests.structured_servers import LLAMA_CPP_PYTHON_REFUSAL, SERVERS, shape

FACTS = {"type": "object", "properties": {"facts": {"type": "array", "items": {"type": "string", "maxLength": 40},
                                                    "minItems": 1, "maxItems": 3}},
         "required": ["facts"], "additionalProperties": False}
MSGS = [{"role": "user", "content": "Caroline went to a support group yesterday."}]
ANNOUNCED = "ctxbench: llm=openai: structured output via"


def backend(url: str, **kw) -> OpenAIChatLLM:
    cfg = {"name": "openai", "model": "loopback", "base_url": url, "api_key_env": None, "tokenizer": None,
           "backoff_s": 0.01, "backoff_max_s": 0.02, "cache": False, **kw}
    return OpenAIChatLLM(option_config("llm", cfg))


def announcements(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith(ANNOUNCED)]


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_the_probe_picks_the_strongest_mechanism_the_server_honours(name, capsys):
    behaviour, expected = SERVERS[name]
    with serve(delay_s=0, reply=behaviour) as server:
        llm = backend(server.base_url)
        r = llm.chat(MSGS, schema=FACTS, max_new_tokens=64)
        sent = []
        for _ in range(2):  # the probe ran once: later calls are sent the chosen way at once
            llm.chat(MSGS, schema=FACTS, max_new_tokens=64, phase="construction")
            sent.append(server.requests)
    rec = llm.results_record()["structured_mode"]
    assert rec["used"] == expected and rec["set_by"] == "probe"
    assert expected == "none" or list(rec["probed"])[-1] == expected and rec["probed"][expected] == "honoured"
    assert all(v.startswith(("refused: HTTP", "ignored: ")) for k, v in rec["probed"].items() if k != expected)
    assert sent[1] - sent[0] == 1 and llm.meter.total("probe").calls == len(rec["probed"])
    assert r.constrained == (expected in ("json_schema", "json_object_schema", "guided_json"))
    if r.constrained:  # the server decoded under the call's schema
        assert parse_reply(r.text, FACTS)
    lines = announcements(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{ANNOUNCED} {LABELS[expected]}")


def test_the_llama_cpp_python_line_names_the_refusal(capsys):
    with serve(delay_s=0, reply=SERVERS["llama_cpp_python"][0]) as server:
        backend(server.base_url).chat(MSGS, schema=FACTS)
    assert announcements(capsys.readouterr().err) == [
        f"{ANNOUNCED} json_object+schema (the server refused json_schema: HTTP 500 "
        "\"Input should be 'text' or 'json_object'\")"]


def test_a_schema_the_server_ignores_is_detected_not_trusted():
    seen = []

    def ignores(body):
        seen.append(shape(body)[0])
        return '{"facts": ["made up"]}' if body.get("response_format") else default_reply(body)  # valid JSON, not the probe's

    with serve(delay_s=0, reply=ignores) as server:
        llm = backend(server.base_url)
        r = llm.chat(MSGS, schema=FACTS)
    assert seen[:3] == ["json_schema", "json_object_schema", "guided_json"]
    assert llm.structured.used == "json_object" and not r.constrained
    assert llm.structured.probed["json_schema"].startswith("ignored: ")
    with pytest.raises(Exception):
        parse_reply('{"facts": ["made up"]}', PROBE_SCHEMA)


def test_a_plain_call_pays_no_probe():
    with serve(delay_s=0) as server:
        llm = backend(server.base_url)
        llm.chat(MSGS)
        assert server.requests == 1
    assert llm.results_record() == {"structured_mode": None, "retries_saved": 0}


def test_concurrent_structured_calls_probe_once():
    with serve(delay_s=0.02, slots=8, reply=SERVERS["llama_cpp_python"][0]) as server:
        llm = backend(server.base_url, concurrency=8)
        rs = llm.chat_batch([MSGS] * 8, schema=FACTS)
        assert server.requests == 2 + 8  # json_schema refused, json_object+schema honoured, then the calls
    assert all(r.constrained and not r.failed for r in rs)


@pytest.mark.parametrize("fmt", ["json_schema", "json_object_schema", "guided_json", "json_object", "none"])
def test_the_override_skips_the_probe(fmt, capsys):
    seen = []

    def record(body):
        seen.append(body)
        return json.dumps({"facts": ["a"]})

    with serve(delay_s=0, reply=record) as server:
        llm = backend(server.base_url, response_format=fmt)
        r = llm.chat(MSGS, schema=FACTS)
        assert server.requests == 1
    assert shape(seen[0])[0] == (None if fmt == "none" else fmt)
    assert llm.results_record()["structured_mode"] == {"used": fmt, "set_by": "llm.response_format", "probed": {}}
    assert r.constrained == (fmt in ("json_schema", "json_object_schema", "guided_json"))
    assert not announcements(capsys.readouterr().err)


def test_the_cache_key_names_the_mechanism(tmp_path):
    path = tmp_path / "c.sqlite"

    def cached(url, **kw):
        cfg = {"name": "openai", "model": "loopback", "base_url": url, "api_key_env": None, "cache_path": str(path),
               **kw}
        llm = maybe_cached(OpenAIChatLLM(option_config("llm", cfg)), option_config("llm", cfg))
        assert isinstance(llm, CachedLLM)
        return llm

    with serve(delay_s=0, reply=SERVERS["llama_cpp_python"][0]) as server:
        assert not cached(server.base_url, response_format="json_object_schema").chat(MSGS, schema=FACTS).cached
        assert not cached(server.base_url, response_format="json_object").chat(MSGS, schema=FACTS).cached
        auto = cached(server.base_url)  # probes json_object_schema: the first row is its reply
        assert auto.chat(MSGS, schema=FACTS).cached and auto.inner.structured.used == "json_object_schema"
        ids = {m: cached(server.base_url, response_format=m).inner.call_cache_id(True)
               for m in ("json_schema", "json_object_schema", "guided_json", "json_object", "none")}
    assert len(set(ids.values())) == 5


def test_a_deterministic_refusal_is_not_retried_a_503_is(capsys):
    def refuse(body):
        raise HTTPError(500, LLAMA_CPP_PYTHON_REFUSAL)

    with serve(delay_s=0, reply=refuse) as server:
        llm = backend(server.base_url, response_format="json_schema", max_retries=5)
        r = llm.chat(MSGS, schema=FACTS, phase="construction")
        assert r.failed and server.requests == 1 and "Input should be" in r.error
    assert llm.retries_saved == 5 and llm.meter.total("construction").failures == 1

    with serve(delay_s=0, reply=lambda body: (_ for _ in ()).throw(HTTPError(400, "bad value for top_k"))) as server:
        llm = backend(server.base_url, max_retries=5)
        assert llm.chat(MSGS).failed and server.requests == 1

    busy = {"n": 0}

    def overloaded(body):
        busy["n"] += 1
        if busy["n"] <= 2:
            raise HTTPError(503, "Service Unavailable: the model is loading")
        return default_reply(body)

    with serve(delay_s=0, reply=overloaded) as server:
        llm = backend(server.base_url, max_retries=5)
        r = llm.chat(MSGS)
        assert not r.failed and server.requests == 3  # transient: retried with backoff, as before
    assert llm.retries_saved == 0


def test_a_probe_the_server_never_answers_stops_the_run_in_one_line():
    def down(body):
        raise HTTPError(503, "Service Unavailable")

    with serve(delay_s=0, reply=down) as server:
        llm = backend(server.base_url, max_retries=1)
        with pytest.raises(LLMUnavailable) as e:
            llm.chat(MSGS, schema=FACTS)
        assert server.requests == 2
    msg = str(e.value)
    assert "structured-output probe" in msg and "llm.response_format=" in msg and "\n" not in msg


def test_bar_mem0_on_a_llama_cpp_python_like_server_with_default_settings(tmp_path):
    """The issue's bar: default settings, the json_object+schema path, one line, 0 invalid outputs."""
    with serve(delay_s=0, slots=4, reply=SERVERS["llama_cpp_python"][0]) as server:
        p = run_cli("eval", "memory=mem0", "dataset=locomo_sample", "dataset.sessions=1", "limit=1", "llm=openai",
                    "llm.model=loopback", f"llm.base_url={server.base_url}", "llm.api_key_env=null", "llm.cache=false",
                    "progress=false", f"hydra.run.dir={tmp_path / 'run'}")
        requests = server.requests
    assert p.returncode == 0, p.stderr[-3000:]
    assert announcements(p.stderr) == [
        f"{ANNOUNCED} json_object+schema (the server refused json_schema: HTTP 500 "
        "\"Input should be 'text' or 'json_object'\")"]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["llm"]["structured_mode"] == {"used": "json_object_schema", "set_by": "probe", "probed": {
        "json_schema": "refused: HTTP 500 \"Input should be 'text' or 'json_object'\"", "json_object_schema": "honoured"}}
    assert res["llm"]["meter"]["probe"]["calls"] == 2 and res["llm"]["retries_saved"] == 5
    assert res["health"]["structured_calls"] > 0 and res["health"]["invalid_outputs"] == 0
    assert res["health"]["failed_calls"] == 0 and res["health"]["status"] == "ok"
    meter = res["llm"]["meter"]
    assert requests == sum(meter[k]["calls"] for k in meter)
