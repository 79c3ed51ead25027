"""The System contract, parametrized over the registry (as kvpress loops over its presses).

Every registered memory system and every registered method runs ingest → answer → score through
the one evaluator: memory systems on real LoCoMo (conv-26, first session) with the bench's scripted
chat model (whose replies live beside each system's prompts), methods on the tiny random Llama.
Registration refuses what does not implement the contract; the evaluator post-processes once,
idempotently, and every prompt-based system sees the same rendered history.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.qa import get_prompt
from ctxbench.core import registry
from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.evaluation.evaluator import evaluate_samples, run_system
from ctxbench.qa.forms import NOT_MENTIONED, adversarial_options, postprocess, qa_prompt
from ctxbench.core.render import render_history
from ctxbench.core.system import ContractError, System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage

from http_memory import with_remote
from memory_scripted import BowEmbedder
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo10.json"


def composed(group: str, name: str):
    """The real ``eval`` config's ``group`` node with ``group=name`` (Hydra defaults applied)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="eval", overrides=[f"{group}={name}"])
    node = cfg[group]
    OmegaConf.set_struct(node, False)
    return node


# ---- registration ---------------------------------------------------------------------------------

def test_register_refuses_what_is_not_a_system():
    class NotASystem:
        def ingest(self, history): ...

        def answer(self, question): ...

    class Half(System):
        def ingest(self, history): ...

    with pytest.raises(ContractError, match="does not derive from ctxbench.core.system.System"):
        registry.register("memory", "not_a_system_test")(NotASystem)
    with pytest.raises(ContractError, match="does not implement answer"):
        registry.register("method", "half_test")(Half)
    with pytest.raises(ContractError, match="register a System subclass"):
        registry.register("method", "factory_test")(lambda cfg, bundle: None)
    assert "not_a_system_test" not in registry.names("memory")


def test_every_registered_system_is_a_system():
    for kind in ("memory", "method"):
        for name in registry.names(kind):
            cls = registry.get(kind, name)
            assert issubclass(cls, System) and not getattr(cls, "__abstractmethods__", None), (kind, name)


def test_run_system_refuses_a_duck_typed_object(tmp_path):
    class Duck:
        def ingest(self, history): ...

        def answer(self, question):
            return Prediction("x")

    with pytest.raises(ContractError, match="not a ctxbench.core.system.System"):
        run_system(Duck(), [], tmp_path, progress=False)


# ---- every memory system through the evaluator -----------------------------------------------------

@pytest.fixture(scope="module")
def conv26():
    if not LOCOMO.exists():
        pytest.skip(f"no {LOCOMO}")
    return registry.build("dataset", option_config("dataset", {"name": "locomo", "path": str(LOCOMO),
                                                       "conversations": ["conv-26"], "limit": 3}))


def scripted_memory_run(name: str, samples, folder, max_sessions: int | None = None):
    """Memory system ``name`` (its composed config) on ``samples`` through the evaluator, on the bench's scripted
    chat model and the bag-of-words embedder: (results, predictions.jsonl records, the scripted model, the
    config it was built from)."""
    cfg = with_remote(name, composed("memory", name))  # memory=http: the reference server in a thread
    if max_sessions is not None and ("max_sessions" in cfg or cfg.get("needs_embedder")):
        cfg.max_sessions = max_sessions
    if "progress" in cfg:
        cfg.progress = False
    llm = ScriptedChatModel()
    embedder = BowEmbedder() if cfg.get("needs_embedder") else None
    system = registry.build("memory", cfg, llm=llm, embedder=embedder, workdir=folder / "store")
    res = evaluate_samples(system, samples, folder, llm=llm)
    system.close()
    recs = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return res, recs, llm, cfg


@pytest.mark.parametrize("name", registry.names("memory"))
def test_memory_system_contract(name, conv26, tmp_path):
    res, recs, llm, cfg = scripted_memory_run(name, conv26, tmp_path, max_sessions=1)
    assert len(recs) == 3 and res["overall"]["n"] == 3
    assert not llm.unknown, f"{name}: prompts without a scripted reply beside them: {dict(llm.unknown)}"
    assert res["health"]["status"] == "ok" and res["health"]["invalid_outputs"] == 0, res["health"]
    for r, q in zip(recs, conv26[0].questions):
        assert r["prediction"] == postprocess(q, r["raw_prediction"])
        assert r["usage"]["answer_calls"] >= 1 and r["f1"] is not None
    calls = llm.meter.get("construction").calls + llm.meter.get("answer").calls
    assert res["health"]["llm_calls"] == calls  # the one accounting path agrees with the backend meter
    assert set(llm.meter.phases) <= {"construction", "answer"}  # construction and answer tokens kept apart
    if not cfg.get("needs_embedder"):
        return
    # a system that builds a store: usage filled from it, and a fresh system on the same store resumes
    u = recs[0]["usage"]
    assert u["held_text"] > 0 and u["memory_items"] > 0
    assert u["construction_calls"] == llm.meter.get("construction").calls
    assert (u["construction_calls"] > 0) == (name not in ("rag", "memgpt"))  # memgpt summarises only on overflow
    llm2 = ScriptedChatModel()
    again = registry.build("memory", cfg, llm=llm2, embedder=BowEmbedder(), workdir=tmp_path / "store")
    again.ingest(conv26[0].history)
    again.close()
    assert llm2.meter.get("construction").calls == 0 and calls > 0


@pytest.mark.parametrize("name", [n for n in registry.names("memory")
                                  if load_conf_file(ROOT / "conf" / "memory" / f"{n}.yaml").get("needs_embedder")])
def test_memory_system_on_the_dialsim_fixture(name, tmp_path):
    """The DialSim fixture (multiple-choice questions, "March 3, 2021" dates) through the evaluator."""
    samples = registry.build("dataset", load_conf_file(ROOT / "conf" / "dataset" / "dialsim_sample.yaml"))
    cfg = load_conf_file(ROOT / "conf" / "memory" / f"{name}.yaml")
    cfg.progress = False
    llm = ScriptedChatModel()
    system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == sum(len(s.questions) for s in samples) > 0  # one history per question session
    assert all(r["usage"]["memory_items"] > 0 for r in recs)
    if name == "memorybank":  # three dated sessions on three days: one event summary per day
        assert len(system.store.records(samples[-1].history.id, "event")) == 3
    system.close()


# ---- every method through the evaluator -----------------------------------------------------------

@pytest.fixture
def tiny():
    """A fresh tiny random Llama per test (methods wrap the model they are given)."""
    from ctxbench.models.loading import load_model

    return load_model(option_config("model", {"name": "tiny"}))


def small_history() -> list[Sample]:
    turns = [Turn("Ann", f"I moved to Paris in May and I paint on day {i}.", f"D1:{i}") for i in range(1, 7)]
    h = History("h1", [Session("1", turns, "1:56 pm on 8 May, 2023")], speakers=["Ann", "Bob"])
    qs = [Question("q1", "Where did Ann move?", "Paris", 4, "single-hop"),
          Question("q2", "Did Ann sell her car?", "", 5, "adversarial", adversarial_answer="Yes")]
    return [Sample(h, qs)]


SMALL = {"icae_pretrain": {"mem_size": 4, "max_segments": 2}, "icae_finetune": {"mem_size": 4, "max_segments": 2},
         "ccm_concat": {"n_tok": 2, "step_tokens": 32}, "ccm_merge": {"n_tok": 2, "step_tokens": 32},
         "lococo": {"segment_len": 32, "mem_size": 48, "local_len": 8}, "h2o": {"segment_len": 32, "mem_size": 48},
         "streamingllm": {"segment_len": 32, "mem_size": 48}, "full_cache": {"segment_len": 32}}


# methods built on an optional package (not in `pip install -e .`): skipped, with the reason, when it is missing
OPTIONAL_PACKAGE = {"kvpress": "kvpress", "llmlingua": "llmlingua", "llmlingua2": "llmlingua"}


def method_params() -> list:
    import importlib.util

    out = []
    for name in registry.names("method"):
        pkg = OPTIONAL_PACKAGE.get(name)
        missing = pkg is not None and importlib.util.find_spec(pkg) is None
        out.append(pytest.param(name, marks=pytest.mark.skipif(
            missing, reason=f"method={name} needs the optional package {pkg} (make setup installs it)")))
    return out


@pytest.mark.parametrize("name", method_params())
def test_method_contract(name, tiny, tmp_path):
    cfg = OmegaConf.merge(composed("method", name), SMALL.get(name, {}), {"max_new_tokens": 4})
    if name == "llmlingua2":  # its classifier is a folder the user gives: a tiny random one here
        from test_llmlingua_methods import tiny_classifier

        cfg.classifier = str(tiny_classifier(tmp_path / "classifier"))
    system = registry.build("method", cfg, bundle=tiny)
    system.eval()
    res = evaluate_samples(system, small_history(), tmp_path)
    recs = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == ["q1", "q2"] and res["overall"]["n"] == 2
    for r, q in zip(recs, small_history()[0].questions):
        assert r["prediction"] == postprocess(q, r["raw_prediction"])  # raw from the system, cleaned once here
        assert r["usage"]["answer_calls"] == 1 and r["usage"]["answer_completion_tokens"] <= 4


# ---- post-processing: once, idempotent -------------------------------------------------------------

def test_postprocess_is_idempotent_over_every_locomo_distractor():
    if not LOCOMO.exists():
        pytest.skip(f"no {LOCOMO}")
    data = json.loads(LOCOMO.read_text())
    n, short = 0, set()
    for s in data:
        for i, item in enumerate(s["qa"]):
            if item["category"] != 5:
                continue
            wrong = str(item.get("adversarial_answer", item.get("answer", "")))
            q = Question(f"{s['sample_id']}-{i}", item["question"], "", 5, "adversarial", adversarial_answer=wrong)
            for x in ("a", "b", "(a)", "(b)", " A ", "b.", "(a).", wrong, wrong.lower(), NOT_MENTIONED, "Yes",
                      "No", "7", "I do not know", ""):
                once = postprocess(q, x)
                assert postprocess(q, once) == once, (q.id, x, once)
                n += 1
            if len(wrong) <= 3:
                short.add(wrong)
    assert n > 400 * 10 and {"Yes", "No", "7"} <= short  # the 1-3 character distractors are covered


def test_a_short_distractor_is_not_rewritten_by_a_second_cleaning():
    """The issue's case: reply 'a' whose option is "Yes" scores as "Yes" (wrong), not as 'not mentioned'."""
    q = next(Question(f"x{i}", "Did she sell it?", "", 5, "adversarial", adversarial_answer="Yes") for i in range(99)
             if adversarial_options(Question(f"x{i}", "", "", 5, "adversarial", adversarial_answer="Yes"))["a"] == "Yes")
    assert postprocess(q, "a") == "Yes" and postprocess(q, "Yes") == "Yes" and postprocess(q, "(b)") == NOT_MENTIONED


class Replier(System):
    """A System whose raw reply is fixed: shows that the evaluator alone cleans it, once."""

    def __init__(self, reply: str):
        self.reply = reply

    def ingest(self, history):
        self.h = history

    def answer(self, question):
        return Prediction(self.reply, Usage(answer_calls=1))


def test_evaluator_cleans_once(tmp_path):
    h = History("h", [Session("1", [Turn("A", "hi")], "8 May, 2023")], speakers=["A", "B"])
    q = next(Question(f"x{i}", "Did she sell it?", "", 5, "adversarial", adversarial_answer="Yes") for i in range(99)
             if adversarial_options(Question(f"x{i}", "", "", 5, "adversarial", adversarial_answer="Yes"))["a"] == "Yes")
    res = evaluate_samples(Replier("a"), [Sample(h, [q])], tmp_path)
    rec = json.loads((tmp_path / "predictions.jsonl").read_text())
    assert rec["raw_prediction"] == "a" and rec["prediction"] == "Yes" and res["overall"]["f1"] == 0.0


# ---- one rendering of the history ------------------------------------------------------------------

@contextlib.contextmanager
def capture_chat_template(tok):
    """Record the user message of every chat-template call on ``tok``."""
    seen: list[str] = []
    orig = tok.apply_chat_template

    def spy(messages, *a, **kw):
        seen.append(messages[-1]["content"])
        return orig(messages, *a, **kw)

    tok.apply_chat_template = spy
    try:
        yield seen
    finally:
        tok.apply_chat_template = orig


def test_prompt_based_systems_see_the_same_history_text(tiny, tmp_path):
    """method=lm and memory=full_context put the identical user message in front of the model."""
    samples = small_history()
    q = samples[0].questions[0]
    llm = ScriptedChatModel()
    fc = registry.build("memory", load_conf_file(ROOT / "conf" / "memory" / "full_context.yaml"), llm=llm)
    fc.use_prompt(get_prompt("locomo"))  # the expected text below is LoCoMo's prompt
    fc.ingest(samples[0].history)
    seen: list[str] = []
    orig = llm.chat

    def spy(messages, **kw):
        seen.append(messages[-1]["content"])
        return orig(messages, **kw)

    llm.chat = spy
    fc.answer(q)
    lm = registry.build("method", OmegaConf.merge(load_conf_file(ROOT / "conf" / "method" / "lm.yaml"),
                                                  {"max_new_tokens": 2}), bundle=tiny)
    lm.use_prompt(get_prompt("locomo"))
    lm.ingest(samples[0].history)
    with capture_chat_template(tiny.tokenizer) as lm_seen:
        lm.answer(q)
    expected = qa_prompt(q, render_history(samples[0].history, "locomo"), ["Ann", "Bob"])
    assert seen == [expected] and lm_seen == [expected]
