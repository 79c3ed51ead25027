"""MemGPT's queue manager as in the paper (§2.2) and letta's memgpt/agent.py: a memory-pressure alert
at warn_frac of the FIFO budget, before the flush, where the agent saves to archival (its
archival_memory_insert calls are the only archival writes) and core memory; answering searches
recall and archival; the footprint counts each message once however many were evicted."""
from __future__ import annotations

import json

import pytest

from ctxbench.memory.memgpt import MemGPT
from ctxbench.memory.prompts.memgpt import WARNING, pressure_schema
from ctxbench.core.types import Question

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM
from test_memory_memgpt import cfg, history, pressure, summary_calls


def call(name, **args):
    return json.dumps({"function": name, "args": args})


def saver():
    """On each alert: archive the newest recent message, note it in core memory, then done."""
    def respond(messages, phase, **kw):
        if phase != "construction":
            return "unused"
        if not pressure(messages):
            return "SUM"
        user = messages[-1]["content"]
        if "RESULT of core_memory_append" in user:
            return call("done")
        recent = [ln for ln in messages[1]["content"].split("RECENT MESSAGES:\n")[1].split("\n\n")[0].split("\n")
                  if ln.startswith(("Alice:", "Bob:"))]
        if "RESULT of archival_memory_insert" in user:
            return call("core_memory_append", content=f"Saw {recent[-1].split()[-1]}.")
        return call("archival_memory_insert", content=f"Fact: {recent[-1]}")
    return respond


def test_alert_before_each_flush_and_archival_only_by_the_agent(tmp_path):
    llm = ScriptedLLM(saver())
    m = MemGPT(cfg(working_max_tokens=200), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    sizes = []  # FIFO size when each construction call is made
    orig = llm.chat

    def chat(messages, **kw):
        sizes.append(m.fifo_size())
        return orig(messages, **kw)
    llm.chat = chat
    m.ingest(history())
    cons = [c for c in llm.calls if c["phase"] == "construction"]
    events = "".join(("P" if "RESULT of" not in c["messages"][-1]["content"] else "") if pressure(c["messages"])
                     else "S" for c in cons)
    # one alert per fill-up, always before the flush that empties the queue: P S P S ...
    assert events.startswith("PS") and "SS" not in events and "PP" not in events
    assert events.count("S") == m.counts["flushes"] >= 3 and events.count("P") == m.counts["pressure_warnings"]
    first = next(i for i, c in enumerate(cons) if pressure(c["messages"]))
    assert sizes[first] > 0.7 * 24  # the alert fires past warn_frac of the budget ...
    assert WARNING in cons[first]["messages"][-1]["content"]
    assert cons[first]["schema"] == pressure_schema()  # decoded under the bounded save/done schema
    # the alert shows what is about to be evicted: the flush that follows evicts messages it showed
    shown = cons[first]["messages"][-1]["content"]
    evicted_first = cons[first + 3]["messages"][-1]["content"].split("EVICTED MESSAGES:\n")[1].split("\n\nNEW")[0]
    assert all(line in shown for line in evicted_first.split("\n") if line.startswith(("Alice", "Bob")))
    # archival storage holds exactly the agent's inserts, dated, searchable by meaning
    arch = m.store.records("h", "archival")
    assert len(arch) == m.counts["pressure_archival_memory_insert"] == m.counts["pressure_warnings"]
    assert all(r.text.startswith("Fact: ") and r.meta == {"source": "agent"} for r in arch)
    assert m.archival_search(arch[0].text)[0] == f"[{arch[0].time}] {arch[0].text}"
    assert arch[0].time == "1:00 pm on 1 May, 2023"
    assert m.working.count("Saw ") == m.counts["pressure_core_memory_append"] == m.counts["pressure_warnings"]
    assert m.counts["pressure_done"] == m.counts["pressure_warnings"]
    # recall still holds every message, the evicted ones included
    assert len(m.store.records("h", "message")) == 22
    assert m.conversation_search("apple")[0].endswith("Alice: I like apple and more apple")


def test_answer_searches_the_agents_archival_and_recall(tmp_path):
    script = iter([call("archival_memory_search", query="apple"), call("conversation_search", query="banana"),
                   call("send_message", message="apple")])

    def respond(messages, phase, **kw):
        return saver()(messages, phase) if phase == "construction" else next(script)
    llm = ScriptedLLM(respond)
    m = MemGPT(cfg(max_steps=3, working_max_tokens=200), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    n0 = len(llm.calls)
    pred = m.answer(Question("q", "What fruit?", "apple"))
    calls = llm.calls[n0:]
    assert pred.text == "apple"
    arch = calls[1]["messages"][-1]["content"]
    assert "RESULT of archival_memory_search" in arch and "Fact: " in arch  # the agent's own passage
    assert "Bob: I like banana and more banana" in calls[2]["messages"][-1]["content"]  # recall


def test_no_alert_with_pressure_steps_0_and_a_bad_warn_frac(tmp_path):
    llm = ScriptedLLM(saver())
    m = MemGPT(cfg(pressure_steps=0), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    assert not any(pressure(c["messages"]) for c in llm.calls) and m.counts["flushes"] >= 3
    assert m.store.records("h", "archival") == []
    with pytest.raises(ValueError, match="warn_frac"):
        MemGPT(cfg(warn_frac=0), llm=llm, embedder=BowEmbedder(), workdir=tmp_path / "x")


def test_footprint_counts_each_message_once(tmp_path):
    """Evicted messages live in recall storage only: a FIFO that flushed many times keeps the same
    items as one that never flushed, and the tokens differ only by the summary held in state (the
    earlier automatic archive counted each evicted turn a second time)."""
    def build(fifo, sub, **kw):
        llm = ScriptedLLM(saver())
        m = MemGPT(cfg(fifo_tokens=fifo, pressure_steps=0, **kw), llm=llm, embedder=BowEmbedder(),
                   workdir=tmp_path / sub)
        m.ingest(history())
        return m, m.answer(Question("q", "?", "x")).usage, llm
    small, u_small, llm = build(24, "a")
    big, u_big, _ = build(4000, "b")
    assert small.counts["flushes"] >= 3 and big.counts["flushes"] == 0
    messages = small.store.records("h", "message")
    assert len(messages) == 22 == u_small.memory_items == u_big.memory_items
    once = sum(llm.count_tokens(r.text) for r in messages)
    state = llm.count_tokens(small.working) + llm.count_tokens(small.summary)
    assert u_small.memory_tokens == once + state and u_big.memory_tokens == once + llm.count_tokens(big.working)
    old, u_old, _ = build(24, "c", archive_evicted=True)  # the earlier behaviour: copies are extra items
    assert u_old.memory_items == 22 + old.counts["evicted_messages"] - 2  # less the 2 session events


def test_agent_inserts_and_summary_are_in_the_footprint(tmp_path):
    llm = ScriptedLLM(saver())
    m = MemGPT(cfg(working_max_tokens=200), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    m.ingest(history())
    u = m.answer(Question("q", "?", "x")).usage
    recs = m.store.records("h")
    arch = [r for r in recs if r.kind == "archival"]
    assert arch and u.memory_items == 22 + len(arch)
    assert u.memory_tokens == (sum(llm.count_tokens(r.text) for r in recs) + llm.count_tokens(m.working)
                               + llm.count_tokens(m.summary))
    assert [c for c in summary_calls(llm)]


def test_fifo_is_capped_at_the_window(tmp_path):
    """The paper passes the model's window as fifo_tokens; the FIFO gets what the window leaves beside
    the main context's fixed part, so the whole prompt reaches the window when the queue is full."""
    llm = ScriptedLLM("x", context_window=3000)
    m = MemGPT(cfg(fifo_tokens=3000), llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    assert m.fifo_tokens == m.window_fifo() < 3000
    assert 0 < 3000 - m.fifo_tokens < 1500
    assert MemGPT(cfg(fifo_tokens=24), llm=llm, embedder=BowEmbedder(), workdir=tmp_path / "b").fifo_tokens == 24
    with pytest.raises(ValueError, match="leaves no room for the FIFO"):
        MemGPT(cfg(), llm=ScriptedLLM("x", context_window=600), embedder=BowEmbedder(), workdir=tmp_path / "c")
