"""MemGPT: FIFO overflow → eviction → recursive summary (previous summary + evicted messages); evicted
messages stay in recall storage (conversation search over every message); a memory-pressure alert
before each flush where the agent saves to archival/core memory (archival holds only its inserts);
paging with JSON function calls (searches, invalid calls counted, send_message answers, best-effort
answer when steps run out); the footprint counts each message once; resume."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.qa import get_prompt
from ctxbench.core import registry
from ctxbench.evaluation.evaluator import history_dir, run_system
from ctxbench.llm.schema import SchemaError, parse_reply
from ctxbench.memory.memgpt import MemGPT
from ctxbench.memory.prompts.memgpt import call_schema
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
WORDS = ["apple", "banana", "cherry", "dolphin", "eagle", "falcon", "grape", "harbor", "igloo", "jungle",
         "kettle", "lemon", "mango", "nectar", "olive", "pepper", "quartz", "raven", "salmon", "tulip"]


def history() -> History:
    """Two sessions of 10 turns; turn k mentions WORDS[k] twice (a unique, searchable word)."""
    sessions, k = [], 0
    for s in range(2):
        turns = []
        for i in range(10):
            turns.append(Turn("Alice" if i % 2 == 0 else "Bob", f"I like {WORDS[k]} and more {WORDS[k]}",
                              f"D{s + 1}:{i + 1}"))
            k += 1
        sessions.append(Session(f"session_{s + 1}", turns, f"1:00 pm on {s + 1} May, 2023"))
    return History(id="h", sessions=sessions, speakers=["Alice", "Bob"])


def cfg(**kw):
    base = {"name": "memgpt", "fifo_tokens": 24, "evict_frac": 0.5, "max_steps": 3, "archival_k": 3,
            "recall_k": 3, "progress": False}
    return option_config("memory", {**base, **kw})


DONE = json.dumps({"function": "done", "args": {}})


def pressure(messages) -> bool:
    return messages[0]["content"].startswith("You are the memory of")


def summariser():
    """Summary calls return SUM0, SUM1, ...; memory-pressure calls stop at once; answer calls are
    scripted per test."""
    n = {"k": 0}

    def respond(messages, phase, **kw):
        if phase == "construction" and pressure(messages):
            return DONE
        if phase == "construction":
            n["k"] += 1
            return f"SUM{n['k'] - 1}"
        return "unused"
    return respond


def summary_calls(llm):
    return [c for c in llm.calls if c["phase"] == "construction" and not pressure(c["messages"])]


def test_eviction_recursive_summary_to_recall(tmp_path):
    llm = ScriptedLLM(summariser())
    m = MemGPT(cfg(), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    sizes = []
    orig = m.apply

    def apply(step, i):
        orig(step, i)
        sizes.append(m.fifo_size())
    m.apply = apply
    m.ingest(history())
    assert sizes and max(sizes) <= 24  # the FIFO never exceeds its token budget after a step
    assert m.fifo_size() == sum(llm.count_tokens(x["text"]) for x in m.fifo)
    prompts = [c["messages"][-1]["content"] for c in summary_calls(llm)]
    assert len(prompts) == m.counts["flushes"] >= 3
    fifo_texts = {x["text"] for x in m.fifo}
    all_turns = [f"{t.speaker}: {t.text}" for s in history().sessions for t in s.turns]
    evicted = [t for t in all_turns if t not in fifo_texts]
    assert len(evicted) + len([t for t in all_turns if t in fifo_texts]) == 20 and len(evicted) >= 10
    for k, p in enumerate(prompts):  # recursion: each summary prompt carries the previous summary
        prev = p.split("PREVIOUS SUMMARY:\n")[1].split("\n")[0]
        assert prev == ("(none)" if k == 0 else f"SUM{k - 1}")
    for t in evicted:  # every evicted message was summarised exactly once
        assert sum(t in p.split("EVICTED MESSAGES:")[1] for p in prompts) == 1
    assert m.summary == f"SUM{len(prompts) - 1}"
    # evicted messages are not copied to archival storage (only the agent's inserts go there) ...
    assert m.store.records("h", "archival") == [] and m.archival_search("apple") == []
    # ... they stay in recall storage, which holds every message (evicted or not), keyword-searchable
    assert "Alice: I like apple and more apple" in evicted
    assert len(m.store.records("h", "message")) == 22  # 20 turns + 2 session events
    assert m.conversation_search("what about the TULIP?")[0].endswith("Bob: I like tulip and more tulip")
    assert m.conversation_search("apple")[0] == "[1:00 pm on 1 May, 2023] Alice: I like apple and more apple"
    assert m.conversation_search("zebra") == []
    # a fresh system on the same folder resumes: no LLM call, same state
    summary, fifo = m.summary, [x["text"] for x in m.fifo]
    m.close()
    llm2 = ScriptedLLM(summariser())
    m2 = MemGPT(cfg(), llm=llm2, embedder=BowEmbedder(), workdir=tmp_path)
    m2.ingest(history())
    assert llm2.calls == [] and m2.summary == summary and [x["text"] for x in m2.fifo] == fifo
    assert m2.warned == m.warned
    assert len(m2.conversation_search("apple")) == 1  # recall rows not duplicated


def test_archive_evicted_keeps_the_earlier_automatic_archive(tmp_path):
    """archive_evicted=true (not MemGPT's): evicted turns are also embedded into archival storage."""
    llm = ScriptedLLM(summariser())
    m = MemGPT(cfg(archive_evicted=True, pressure_steps=0), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    fifo_texts = {x["text"] for x in m.fifo}
    evicted = [f"{t.speaker}: {t.text}" for s in history().sessions for t in s.turns
               if f"{t.speaker}: {t.text}" not in fifo_texts]
    arch = m.store.records("h", "archival")
    assert sorted(r.text.split("] ", 1)[1] for r in arch) == sorted(evicted)
    assert arch[0].text.startswith("[1:00 pm on 1 May, 2023] ")
    assert m.archival_search("apple")[0] == "[1:00 pm on 1 May, 2023] Alice: I like apple and more apple"


def test_paging_recall_then_send_message(tmp_path):
    answers = iter([
        json.dumps({"function": "conversation_search", "args": {"query": "apple"}}),
        "I think the answer is apple",  # no JSON: an invalid call
        json.dumps({"function": "fly_away", "args": {}}),  # unknown function: invalid
        json.dumps({"function": "send_message", "args": {"message": "apple"}}),
    ])

    def respond(messages, phase, **kw):
        return (DONE if pressure(messages) else "SUM") if phase == "construction" else next(answers)
    llm = ScriptedLLM(respond)
    m = MemGPT(cfg(max_steps=5), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    n0 = len(llm.calls)
    pred = m.answer(Question("q1", "What does Alice like?", "apple", category_name="single-hop"))
    calls = llm.calls[n0:]
    assert pred.text == "apple"
    assert pred.usage.answer_calls == 4 == len(calls) and all(c["phase"] == "answer" for c in calls)
    assert pred.usage.extra["invalid_calls"] == 2 and pred.usage.extra["paging_steps"] == 4
    assert pred.usage.extra["function_calls"] == {"conversation_search": 1, "send_message": 1}
    assert not pred.usage.extra["fallback_answer"]
    assert pred.usage.answer_prompt_tokens == sum(sum(len(x["content"].split()) for x in c["messages"])
                                                  for c in calls)
    first = calls[0]["messages"]
    assert "WORKING CONTEXT:" in first[0]["content"] and m.summary in first[0]["content"]
    assert all(x["text"] in first[1]["content"] for x in m.fifo)  # the whole FIFO is in view
    assert "apple" not in first[1]["content"]  # ... and the evicted turn is not
    assert "RESULT of conversation_search" in calls[1]["messages"][-1]["content"]
    assert "I like apple and more apple" in calls[1]["messages"][-1]["content"]  # an evicted turn, from recall
    assert calls[2]["messages"][-1]["content"].startswith("ERROR: no JSON")
    assert "'fly_away'" in calls[3]["messages"][-1]["content"]  # not one of the call shapes
    assert all(c["schema"] == call_schema() for c in calls)  # every step is decoded under the one schema
    assert pred.usage.construction_calls == llm.meter.get("construction").calls > 0


def test_steps_run_out_best_effort_answer(tmp_path):
    def respond(messages, phase, **kw):
        if phase == "construction":
            return "SUM"
        if "Short answer" in messages[-1]["content"]:
            return "salmon"
        return json.dumps({"function": "conversation_search", "args": {"query": "salmon"}})
    llm = ScriptedLLM(respond)
    m = MemGPT(cfg(max_steps=2), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.use_prompt(get_prompt("locomo"))  # "Short answer" is LoCoMo's prompt
    m.ingest(history())
    n0 = len(llm.calls)
    pred = m.answer(Question("q", "What fish?", "salmon", category_name="single-hop"))
    last = llm.calls[-1]["messages"][-1]["content"]
    assert pred.text == "salmon" and pred.usage.answer_calls == 3 == len(llm.calls) - n0
    assert pred.usage.extra["fallback_answer"] and pred.usage.extra["invalid_calls"] == 0
    assert pred.usage.extra["function_calls"] == {"conversation_search": 2}
    assert "Short answer" in last and "I like salmon and more salmon" in last  # search results shown
    assert m.summary in last


def test_core_memory_edits(tmp_path):
    script = iter([
        json.dumps({"function": "core_memory_append", "args": {"content": "Alice likes apples."}}),
        json.dumps({"function": "core_memory_replace",
                    "args": {"old_content": "likes apples", "new_content": "loves apples"}}),
        json.dumps({"function": "core_memory_append", "args": {"content": "x " * 75}}),  # too long to keep
        json.dumps({"function": "send_message", "args": {"message": "done"}}),
    ])

    def respond(messages, phase, **kw):
        return "SUM" if phase == "construction" else next(script)
    llm = ScriptedLLM(respond)
    m = MemGPT(cfg(max_steps=4, working_max_tokens=40), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    pred = m.answer(Question("q", "?", "x"))
    assert pred.text == "done" and m.working.endswith("Alice loves apples.")
    assert pred.outputs["counts"]["failed_edits"] == 1 and "Edit failed" in llm.calls[-1]["messages"][-1]["content"]
    assert m.store.get_state("h", "memgpt")["working"] == m.working  # persisted
    # the next question sees the edited working context
    script2 = iter([json.dumps({"function": "send_message", "args": {"message": "ok"}})])
    llm.__dict__["_fn"] = lambda messages, **kw: next(script2)
    m.answer(Question("q2", "?", "x"))
    assert "Alice loves apples." in llm.calls[-1]["messages"][0]["content"]


def test_call_schema_accepts_exactly_the_function_shapes():
    schema = call_schema()
    for call in ({"function": "send_message", "args": {"message": "Paris"}},
                 {"function": "archival_memory_search", "args": {"query": "x"}},
                 {"function": "core_memory_replace", "args": {"old_content": "a", "new_content": "b"}}):
        assert parse_reply(json.dumps(call), schema) == call
    for bad in ({"function": "send_message", "args": {}}, {"function": "nope", "args": {"query": "x"}},
                {"function": "conversation_search", "query": "y"},  # flattened arguments
                {"function": "send_message", "args": {"message": "x" * 161}},  # over the length bound
                {"function": "send_message", "args": {"message": "a", "extra": "b"}}, [1, 2]):
        with pytest.raises(SchemaError):
            parse_reply(json.dumps(bad), schema)


def test_config_validation(tmp_path):
    with pytest.raises(ValueError, match="evict_frac"):
        MemGPT(cfg(evict_frac=0), llm=ScriptedLLM("x"), embedder=BowEmbedder(), workdir=tmp_path)
    with pytest.raises(ValueError, match="max_steps"):
        MemGPT(cfg(max_steps=0), llm=ScriptedLLM("x"), embedder=BowEmbedder(), workdir=tmp_path)


def test_locomo_through_evaluator(tmp_path):
    """conf/memory/memgpt.yaml through the registry and the one evaluator on real conv-26 (1 session)."""
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    samples = registry.build("dataset", option_config("dataset",
        {"name": "locomo", "path": str(DATA), "conversations": ["conv-26"], "limit": 2}))
    c = load_conf_file(ROOT / "conf" / "memory" / "memgpt.yaml")
    c.max_sessions, c.progress, c.fifo_tokens = 1, False, 120

    def respond(messages, phase, **kw):
        if phase == "construction":
            return DONE if pressure(messages) else "Caroline and Melanie talked."
        if "Short answer" in messages[-1]["content"]:
            return "Not mentioned in the conversation"
        return json.dumps({"function": "archival_memory_search", "args": {"query": "support group"}})
    llm = ScriptedLLM(respond, context_window=2048)
    system = registry.build("memory", c, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == 2
    u = recs[0]["usage"]
    assert u["answer_calls"] == c.max_steps + 1 and u["construction_calls"] > 0
    built = recs[0]["construction"]["outputs"]["counts"]  # the history's own counts, carried once per history
    assert built["flushes"] + built["pressure_warnings"] == u["construction_calls"] and u["memory_items"] > 0
    assert built["pressure_done"] == built["pressure_warnings"] >= built["flushes"] > 0
    assert recs[0]["construction"]["calls"] == llm.meter.get("construction").calls


@pytest.mark.slow
def test_eval_cli_packaged_model(tmp_path):
    """``python -m ctxbench eval memory=memgpt`` with the packaged SmolLM2-135M and MiniLM on LoCoMo
    conv-26 (first session, a FIFO small enough to flush, 3 questions); a rerun resumes."""
    import os
    import subprocess
    import sys
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled",
               CTXBENCH_CACHE=os.environ.get("CTXBENCH_CACHE", str(tmp_path / "cache")))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ctxbench", "eval", "memory=memgpt", "dataset=locomo", f"dataset.path={DATA}",
           "dataset.conversations=[conv-26]", "dataset.limit=3", "memory.max_sessions=1",
           "memory.fifo_tokens=200", "progress=false", f"hydra.run.dir={out}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3
    for r in preds:
        u = r["usage"]
        assert 1 <= u["extra"]["paging_steps"] <= 4 and u["answer_calls"] >= u["extra"]["paging_steps"]
        assert u["answer_calls"] == u["extra"]["paging_steps"] + int(u["extra"]["fallback_answer"])
    built = preds[0]["construction"]["outputs"]  # what building the history counted, once per history
    extra = built.get("counts", {})
    by_kind = built["structured_output"].get("construction", {}).get("by_kind", {})
    pressure_calls = by_kind.get("pressure_call", {}).get("calls", 0)
    assert preds[0]["construction"]["calls"] == extra["flushes"] + pressure_calls and extra["flushes"] > 0
    assert pressure_calls >= extra["pressure_warnings"] >= extra["flushes"]  # an alert before each flush
    assert (out / "results.json").exists() and (history_dir(out, preds[0]["history_id"]) / "memgpt.sqlite").exists()
    p2 = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 3
