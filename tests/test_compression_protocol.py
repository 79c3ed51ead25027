"""``eval task=compression`` (the kvpress protocol, ctxbench/evaluation/protocol.py): ratio → budget,
every compression method holding at most ceil((1 − r) × n), the question kept out of the cache in the
query-agnostic mode and in it in the query-aware mode, and the protocol block of results.json."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import run_cli
from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.errors import ConfigError
from ctxbench.core.task_protocol import check_ratio, ratio_budget
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.data.errors import DataError
from ctxbench.evaluation.protocol import Protocol, prepare, query_aware_samples
from ctxbench.memory.rag import cap_tokens

ROOT = Path(__file__).resolve().parents[1]
NOISE = " ".join("The grass is green. The sky is blue. The sun is yellow." for _ in range(8))
CONTEXT = f"Some special magic numbers are hidden in the text. {NOISE} The special magic number for key-7 is: 4711. {NOISE}"
QUESTION = "What is the special magic number for key-7 mentioned in the provided text?"


def ruler_like() -> list[Sample]:
    """A hand-made RULER-like document with one question (not the ruler dataset: written beside it)."""
    return [Sample(History("doc-0", [], CONTEXT, []), [Question("doc-0", QUESTION, "4711", "niah", "niah")])]


# ---- ratio → budget ------------------------------------------------------------------------------

def test_ratio_budget_is_the_ceiling_of_what_is_kept():
    assert ratio_budget(0.75, 1000) == 250 and ratio_budget(0.875, 4096) == 512  # exact, no float drift
    assert ratio_budget(0.5, 7) == 4 and ratio_budget(0.9, 3) == 1
    assert ratio_budget(0.0, 123) == 123  # r = 0 keeps everything
    for bad in (1.0, -0.1, 1.5, "half", True, None):
        with pytest.raises(ConfigError, match="compression ratio is in \\[0, 1\\)"):
            check_ratio(bad)


def test_the_task_ratio_bound_is_checked_at_compose_time(tmp_path):
    p = run_cli("eval", "task=compression", "task.ratio=1.0", "method=snapkv", "model=tiny",
                f"hydra.run.dir={tmp_path}")
    assert p.returncode != 0 and "task.ratio" in p.stderr and "[0, 1)" in p.stderr


# ---- every compression method at a ratio -------------------------------------------------------------

SMALL = {"icae_pretrain": {"mem_size": 4, "max_segments": None}, "icae_finetune": {"mem_size": 4, "max_segments": None},
         "ccm_concat": {"n_tok": 2, "step_tokens": 32}, "ccm_merge": {"n_tok": 2, "step_tokens": 32},
         "lococo": {"segment_len": 32, "mem_size": 48, "local_len": 8}, "kvpress": {"press": "knorm"}}
NOT_COMPRESSION = {"lm"}  # the full-context LM baseline: no ratio to compress to


def ratio_methods() -> list:
    import importlib.util

    out = []
    for name in registry.names("method"):
        if name in NOT_COMPRESSION:
            continue
        missing = name == "kvpress" and importlib.util.find_spec("kvpress") is None
        if name == "llmlingua2":  # needs a token classifier folder: its budget is tested with a tiny one there
            out.append(pytest.param(name, marks=pytest.mark.skip(
                reason="llmlingua2 needs method.classifier; tests/test_llmlingua_methods.py checks its budget")))
            continue
        if name == "llmlingua" and importlib.util.find_spec("llmlingua") is None:
            missing = True
        out.append(pytest.param(name, marks=pytest.mark.skipif(missing, reason=f"{name}'s package is not installed "
                                                                                "(make setup)")))
    return out


def test_every_method_but_the_lm_baseline_offers_a_ratio():
    has = {n for n in registry.names("method") if callable(getattr(registry.get("method", n), "set_compression_ratio", None))}
    assert set(registry.names("method")) - has == NOT_COMPRESSION
    assert callable(getattr(registry.get("memory", "rag"), "set_compression_ratio", None))


@pytest.fixture
def tiny():
    from ctxbench.models.loading import load_model

    return load_model(option_config("model", {"name": "tiny"}))


def build_method(name: str, tiny):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        node = compose(config_name="eval", overrides=[f"method={name}"]).method
    OmegaConf.set_struct(node, False)
    system = registry.build("method", OmegaConf.merge(node, SMALL.get(name, {}), {"max_new_tokens": 2}), bundle=tiny)
    system.eval()
    return system


@pytest.mark.parametrize("name", ratio_methods())
def test_every_compression_method_keeps_its_budget(name, tiny):
    r = 0.75
    system = build_method(name, tiny)
    prepare(system, Protocol(r), f"method={name}")
    sample = ruler_like()[0]
    system.ingest(sample.history)
    u = system.answer(sample.questions[0]).usage
    assert u.extra["compression_ratio"] == r
    budget = u.extra["budget"]
    held = u.held_soft_slots or u.held_kv_slots or u.held_text  # soft slots, KV slots, or kept prompt tokens
    if name == "full_cache":  # the reference keeps all n at any ratio, and says so
        assert budget == held == u.extra["history_tokens"]
        return
    n = {"icae_pretrain": "context_tokens_total", "icae_finetune": "context_tokens_total"}.get(name, "history_tokens")
    if n in u.extra:  # the n the method ingested, in its own tokenizer
        assert budget == math.ceil((1 - r) * u.extra[n]) and u.extra[n] > 100
    assert 0 < held <= budget, (name, held, budget)
    if getattr(system, "_state", None) is not None:  # per layer its press's budget (PyramidKV's pyramid), mean M
        runner = system.runner()
        assert all(layer.slots <= (runner.budget(i) or budget) for i, layer in enumerate(system._state.layers))
        assert system._state.slots <= budget


def test_icae_at_r_075_keeps_its_trained_rate(tiny):
    """ICAE: its mem_size slots per segment, segments of about mem_size / (1 − r) tokens."""
    system = build_method("icae_pretrain", tiny)
    system.set_compression_ratio(0.75)
    system.ingest(ruler_like()[0].history)
    u = system.answer(ruler_like()[0].questions[0]).usage
    assert u.extra["slots"] % 4 == 0 and u.extra["slots"] <= u.extra["budget"]
    assert 4.0 * 0.99 <= u.extra["compression_rate"] < 4.0 * 1.1  # 4 slots per ~16 tokens: its 4x at r = 0.75


def test_ratio_zero_keeps_every_slot(tiny):
    system = build_method("snapkv", tiny)
    system.set_compression_ratio(0.0)
    system.ingest(ruler_like()[0].history)
    assert system._state.slots == system._ingest_tokens  # nothing evicted at r = 0


def test_rag_caps_the_retrieved_text_at_the_budget():
    count = lambda s: len(s.split())  # noqa: E731 - a whitespace tokenizer
    hits = ["one two three", "four five six seven", "eight"]
    assert cap_tokens(hits, 100, count) == "one two three\nfour five six seven\neight"
    assert cap_tokens(hits, 5, count) == "one two three\nfour five"  # the hit that overflows is cut
    assert cap_tokens(hits, 0, count) == ""
    assert all(count(cap_tokens(hits, b, count)) <= b for b in range(10))


# ---- agnostic vs aware -----------------------------------------------------------------------------

def test_the_question_never_reaches_the_cache_in_the_agnostic_mode(tiny):
    from ctxbench.methods.kv_prompt import qa_frame

    system = build_method("snapkv", tiny)
    tok = system.tokenizer
    before, _ = qa_frame(tok, system.answer_prompt, None, [])
    n_context = len(tok(before + CONTEXT, add_special_tokens=False)["input_ids"])
    n_aware = len(tok(before + CONTEXT + "\n" + QUESTION, add_special_tokens=False)["input_ids"])

    system.set_compression_ratio(0.75)
    sample = ruler_like()[0]
    system.ingest(sample.history)
    assert system._state.n_seen == n_context  # the cache was built from the context alone
    kept = torch.cat([layer.pos.flatten() for layer in system._state.layers])
    assert int(kept.max()) < n_context  # every kept slot is a context token
    system.answer(sample.questions[0])
    assert system._state.n_seen == n_context  # answering reads a copy: the question never enters it

    aware = query_aware_samples(ruler_like())[0]
    assert aware.history.text == CONTEXT + "\n" + QUESTION
    system.ingest(aware.history)
    assert system._state.n_seen == n_aware
    kept = torch.cat([layer.pos.flatten() for layer in system._state.layers])
    assert int(kept.max()) == n_aware - 1  # SnapKV's window (the question's end) is in the cache


def test_query_aware_asks_the_question_empty_as_kvpress_compress_questions():
    """kvpress evaluate.py, compress_questions: context = context + question; question = "". The model reads
    the question only from what the press kept; the answer prefix still opens its reply."""
    from ctxbench.methods.kv_prompt import qa_frame
    from ctxbench.qa.registry import get_prompt

    q = Question("doc-0", QUESTION, "4711", "niah", "niah", meta={"answer_prefix": " The number is"})
    aware = query_aware_samples([Sample(History("doc-0", [], CONTEXT, []), [q])])[0]
    asked = aware.questions[0]
    assert asked.question == "" and asked.id == q.id and asked.answer == "4711"
    assert asked.meta["question_in_context"] == QUESTION and asked.meta["answer_prefix"] == " The number is"
    ruler = get_prompt("ruler")
    # the user turn is the plain one's text (context, newline, question) ...
    plain = ruler.messages(q, CONTEXT)
    assert ruler.messages(asked, aware.history.text) == plain
    # ... and what follows the compressed part holds no question: only the turn's end and the answer prefix
    _, after = qa_frame(_PlainTok(), ruler, asked, [])
    assert QUESTION not in after and "The number is" in after
    _, after_plain = qa_frame(_PlainTok(), ruler, q, [])
    assert QUESTION in after_plain
    again = query_aware_samples([Sample(History("doc-0", [], CONTEXT, []), [q])], ask_again=True)[0]
    assert again.questions == [q]  # task.ask_again=true: ctxbench's earlier mode, the question asked again


class _PlainTok:
    chat_template = None


def test_query_aware_needs_one_question_on_a_document():
    two = [Sample(History("d", [], "text"), [Question("a", "q1?", "x"), Question("b", "q2?", "y")])]
    with pytest.raises(DataError, match="one is needed"):
        query_aware_samples(two)
    sessions = [Sample(History("c", [Session("1", [Turn("A", "hi", "D1:1")])]), [Question("a", "q?", "x")])]
    with pytest.raises(DataError, match="document histories"):
        query_aware_samples(sessions)


# ---- through the CLI: results.json, usage, resume binding ---------------------------------------------

def write_pwc(path: Path) -> Path:
    row = {"input": CONTEXT, "prompt": QUESTION, "answer": "4711"}
    path.write_text(json.dumps(row) + "\n")
    return path


def eval_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "task=compression", "method=streamingllm", "model=tiny", "dataset=pwc", f"dataset.path={data}",
            "method.max_new_tokens=2", "progress=false", f"hydra.run.dir={out}", *extra]


def test_the_protocol_in_results_json_and_each_answer(tmp_path):
    data = write_pwc(tmp_path / "ruler_like.jsonl")
    p = run_cli(*eval_args(data, tmp_path / "agnostic", "task.ratio=0.75"))
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "agnostic" / "results.json").read_text())
    assert res["protocol"] == {"name": "kvpress", "ratio": 0.75, "query_aware": False,
                               "budget": "(1 - ratio) x context tokens, per example", "prefill": "whole"}
    agnostic = json.loads((tmp_path / "agnostic" / "predictions.jsonl").read_text().splitlines()[0])["usage"]
    n = agnostic["extra"]["history_tokens"]
    assert agnostic["extra"]["compression_ratio"] == 0.75 and agnostic["extra"]["budget"] == math.ceil(0.25 * n)
    assert agnostic["held_kv_slots"] == agnostic["extra"]["budget"]

    p = run_cli(*eval_args(data, tmp_path / "aware", "task.ratio=0.75", "task.query_aware=true"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "aware" / "results.json").read_text())["protocol"]["query_aware"] is True
    line = json.loads((tmp_path / "aware" / "predictions.jsonl").read_text().splitlines()[0])
    aware = line["usage"]
    assert aware["extra"]["history_tokens"] > n  # the question was ingested with the context
    assert line["question"] == QUESTION and line["question_in_context"] is True  # recorded as the question asked

    p = run_cli(*eval_args(data, tmp_path / "agnostic", "task.ratio=0.5"))  # another ratio in the same folder
    assert p.returncode != 0 and "config" in p.stderr.lower()


def test_kvpress_budget_rounding_restores_kvpress_int():
    """kvpress's presses keep int(q_len * (1 - compression_ratio)) (floats, truncated); ctxbench's default is
    ceil in exact decimals. task.budget=kvpress restores kvpress's (99 of 1000 at r = 0.9, 250 of 1001 at 0.75)."""
    from ctxbench.core.task_protocol import set_budget_rounding
    from ctxbench.evaluation.protocol import protocol_record

    assert (ratio_budget(0.9, 1000), ratio_budget(0.75, 1001)) == (100, 251)  # ctxbench: ceil, exact
    try:
        set_budget_rounding("kvpress")
        assert (ratio_budget(0.9, 1000), ratio_budget(0.75, 1001)) == (99, 250)
        assert ratio_budget(0.9, 1000) == int(1000 * (1 - 0.9))
    finally:
        set_budget_rounding("ceil")
    assert "int(" in protocol_record(Protocol(0.5, budget="kvpress"))["budget"]
    with pytest.raises(ValueError):
        set_budget_rounding("round")
