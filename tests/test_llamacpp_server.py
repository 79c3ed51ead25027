"""``llm=openai`` against a real llama.cpp OpenAI-compatible server (slow, optional).

Skipped unless ``CTXBENCH_LLAMACPP_URL`` names a running server's base_url. Start one (builds
llama.cpp's ``llama-server`` once, ~10 min on 2 cores; serves the packaged SmolLM2 GGUF) with::

    scripts/llamacpp_server.sh ~/.cache/ctxbench/llamacpp 8089
    CTXBENCH_LLAMACPP_URL=http://127.0.0.1:8089/v1 python -m pytest -m slow tests/test_llamacpp_server.py

``CTXBENCH_LLAMACPP_MODEL`` picks the model id (default: the first one the server lists).
"""
from __future__ import annotations

import json
import os
import urllib.request

import pytest
from omegaconf import OmegaConf

from ctxbench.llm.base import LLMUnavailable
from ctxbench.core.paths import conf_dir
from ctxbench.core.registry import build

from tests.conftest import run_cli
from ctxbench.config.schemas import load_conf_file

URL = os.environ.get("CTXBENCH_LLAMACPP_URL", "").rstrip("/")
START = ("set CTXBENCH_LLAMACPP_URL to a running llama.cpp server's base_url; start one with "
         "`scripts/llamacpp_server.sh DIR 8089`, then CTXBENCH_LLAMACPP_URL=http://127.0.0.1:8089/v1")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not URL, reason=START)]

MSGS = [{"role": "system", "content": "You are a helpful assistant. Answer in one short sentence."},
        {"role": "user", "content": "What is the capital of France?"}]


def served_models() -> list[str]:
    with urllib.request.urlopen(URL + "/models", timeout=10) as r:
        return [m["id"] for m in json.load(r)["data"]]


@pytest.fixture(scope="module")
def model_id() -> str:
    return os.environ.get("CTXBENCH_LLAMACPP_MODEL") or served_models()[0]


def llm_cfg(model: str, **kw):
    """The shipped ``llm=openai`` config, pointed at the local server (no key, no call cache)."""
    cfg = load_conf_file(conf_dir() / "llm" / "openai.yaml")
    return OmegaConf.merge(cfg, {"base_url": URL, "model": model, "api_key_env": None, "cache": False,
                                 "timeout_s": 120, "max_retries": 1, **kw})


def test_the_server_lists_the_model_and_preflight_passes(model_id):
    assert model_id in served_models()
    build("llm", llm_cfg(model_id)).preflight()  # reachable, no key needed, model listed


def test_preflight_names_a_model_the_server_does_not_list(model_id):
    with pytest.raises(LLMUnavailable, match=f"model 'no-such-model' is not served by {URL}.*{model_id}"):
        build("llm", llm_cfg("no-such-model")).preflight()


def test_a_plain_chat_answers_and_its_usage_is_counted(model_id):
    llm = build("llm", llm_cfg(model_id))
    r = llm.chat(MSGS, max_new_tokens=32, phase="answer")
    assert not r.failed, r.error
    assert r.text.strip() and "paris" in r.text.lower(), r.text
    assert r.prompt_tokens > 10 and 0 < r.completion_tokens <= 32  # the server's own token counts
    c = llm.meter.get("answer")
    assert (c.calls, c.failures, c.prompt_tokens, c.completion_tokens) == (1, 0, r.prompt_tokens,
                                                                           r.completion_tokens)


def test_greedy_chat_is_deterministic_and_max_tokens_caps_the_reply(model_id):
    llm = build("llm", llm_cfg(model_id))
    long_ask = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    a, b = (llm.chat(long_ask, max_new_tokens=8, temperature=0.0) for _ in range(2))
    assert not a.failed and not b.failed
    assert a.text == b.text and a.completion_tokens == b.completion_tokens == 8


def test_a_batch_runs_on_the_server_slots(model_id):
    llm = build("llm", llm_cfg(model_id, concurrency=4))
    asks = [[{"role": "user", "content": f"What is {n} plus {n}? Reply with the number."}] for n in range(1, 7)]
    rs = llm.chat_batch(asks, max_new_tokens=16, phase="construction")
    assert len(rs) == 6 and not any(r.failed for r in rs), [r.error for r in rs]
    c = llm.meter.get("construction")
    assert (c.calls, c.failures) == (6, 0)
    assert c.prompt_tokens == sum(r.prompt_tokens for r in rs) > 6 * 5


def test_eval_through_the_server(model_id, tmp_path):
    """``ctxbench eval ... llm=openai`` end to end: every answer call reached the server and was counted."""
    out = tmp_path / "run"
    p = run_cli("eval", "memory=full_context", "dataset=locomo_sample", "limit=3", "progress=false",
                "llm=openai", f"llm.base_url={URL}", f"llm.model={model_id}", "llm.api_key_env=null",
                "llm.cache=false", "llm.context_window=8192", f"hydra.run.dir={out}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == 3
    cost = res["cost"]
    assert cost["llm_calls_total"]["answer"] == 3 and cost["failed_calls"] == 0
    assert cost["tokens_per_question"]["answer_prompt"] > cost["held_per_question"]["text"] > 100
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["prediction"].strip() for r in rows)
    assert all(r["usage"]["answer_calls"] == 1 and r["usage"]["answer_completion_tokens"] > 0 for r in rows)


def test_structured_calls_are_enforced_by_the_server(model_id):
    """The real Mem0 extraction prompt and an update decision with ids as an enum: valid, never an invented id."""
    from collections import Counter

    from ctxbench.memory.prompts import mem0 as P
    from ctxbench.memory.stores.structured import StructuredCaller

    llm = build("llm", llm_cfg(model_id))
    counts = Counter()
    call = StructuredCaller(llm, retries=0, counts=counts)
    facts = call(P.extract_messages("", "", "8 May 2023", "Caroline: I went to a LGBTQ support group yesterday.\n"
                                    "Melanie: Wow! I am painting a lake sunrise."),
                 P.facts_schema(["Caroline", "Melanie"], 4), kind="extract", max_new_tokens=192)
    assert facts is not None and all(f.startswith(("Caroline", "Melanie")) for f in facts["facts"])
    d = call(P.update_messages([("0", "Caroline likes hiking."), ("1", "Melanie paints.")], "Melanie paints lakes."),
             P.decision_schema(["0", "1"]), kind="update", max_new_tokens=64)
    assert d is not None and d.get("id", "0") in ("0", "1")
    cut = llm.chat(MSGS, max_new_tokens=3, schema=P.facts_schema(["Caroline"], 4))
    assert cut.truncated and cut.constrained  # finish_reason "length", marked, never parsed
    assert counts["structured|construction|extract|valid"] == counts["structured|construction|update|valid"] == 1
