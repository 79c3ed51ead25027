"""Mem0 with one store per speaker (``memory.stores=per_speaker``, the paper setting), as Mem0's
evaluation keeps them (mem0ai/mem0 evaluation/src/memzero/add.py, search.py): each speaker's store
gets that speaker's facts only and its update decisions see only that store; a question searches
each store with its own top-k, and Mem0's answer prompt shows both lists with timestamps exactly
as the source's ``ANSWER_PROMPT`` renders them. ``shared`` keeps one store searched once.
Extraction is one call per message pair for both layouts; per speaker, each fact goes to the store of
the speaker it starts with (also when written ``Name: fact``).

Also: an UPDATE carries the date of the message that updated it (``time``, ``meta.updated``; the
first date in ``meta.created``), and the running summary counts in the memory footprint.
"""
from __future__ import annotations

import json
import re

import pytest
from jinja2 import Template
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.memory.mem0 import Mem0
from ctxbench.qa import get_prompt
from ctxbench.qa.prompts import mem0 as QP
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text
from ctxbench.config.compose import option_config

S1, S2 = "1:56 pm on 8 May, 2023", "10:00 am on 9 June, 2023"
SHARED = {  # words of the new pair -> the facts the "LLM" extracts (once per pair, whatever the layout)
"tea a lot": ["Alice likes tea", "Bob has a dog named Rex"], "green tea now": ["Alice likes green tea"]}
# the reference template's tail (evaluation/prompts.py ANSWER_PROMPT), rendered by jinja2 as search.py does
REF_TAIL = ("    Memories for user {{speaker_1_user_id}}:\n\n    {{speaker_1_memories}}\n\n"
            "    Memories for user {{speaker_2_user_id}}:\n\n    {{speaker_2_memories}}\n\n"
            "    Question: {{question}}\n\n    Answer:\n    ")
QUESTION = Question("q1", "What does Alice drink, and what is Bob's dog called?", "green tea, Rex", category=4)


def history() -> History:
    return History(id="h", speakers=["Alice", "Bob"], sessions=[
        Session("session_1", [Turn("Alice", "I like tea a lot.", "D1:1"),
                              Turn("Bob", "I have a dog named Rex.", "D1:2")], S1),
        Session("session_2", [Turn("Alice", "I like green tea now.", "D2:1"),
                              Turn("Bob", "Rex likes walks.", "D2:2")], S2)])


def responder(messages, phase):
    text, user = prompt_text(messages), messages[-1]["content"]
    if phase == "answer":
        return "green tea"
    if "New messages (" in user:
        new = user.split("New messages (")[1]
        return json.dumps({"facts": SHARED[next(k for k in SHARED if k in new)]})
    if "NEW FACT: " in user:
        fact = user.split("NEW FACT: ")[1].split("\n")[0]
        shown = dict(re.findall(r"^(\d+): (.*)$", user.split("EXISTING MEMORIES:")[1], re.M))
        if fact == "Alice likes green tea":
            rid = next(i for i, t in shown.items() if t == "Alice likes tea")
            return json.dumps({"event": "UPDATE", "id": rid, "text": fact})
        return json.dumps({"event": "ADD"})
    if "Updated summary:" in text:
        return "Alice drinks tea and Bob has a dog named Rex."
    raise AssertionError(f"unexpected prompt: {text[:80]}")


def build(tmp_path, **over) -> tuple[Mem0, ScriptedLLM]:
    llm = ScriptedLLM(responder)
    cfg = option_config("memory", {"name": "mem0", "k": 1, "m": 4, "s": 10, "progress": False, **over})
    mem = Mem0(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    mem.use_prompt(get_prompt("mem0"))
    mem.ingest(history())
    return mem, llm


def test_each_speaker_has_a_store_of_their_own_facts(tmp_path):
    mem, llm = build(tmp_path)
    facts = {r.text: r.meta["speaker"] for r in mem.store.records("h", "fact")}
    assert facts == {"Alice likes green tea": "Alice", "Bob has a dog named Rex": "Bob"}
    extracts = [m[-1]["content"] for _, m in llm.calls if "New messages (" in m[-1]["content"]]
    assert len(extracts) == 2  # one extraction per pair (not per pair and speaker); facts routed by name
    # an update decision sees its own store only: Bob's first fact met an empty store (no call), and
    # Alice's update was shown Alice's memory alone, not Bob's
    updates = [m[-1]["content"] for _, m in llm.calls if "NEW FACT: " in m[-1]["content"]]
    assert len(updates) == 1 and "0: Alice likes tea" in updates[0] and "Rex" not in updates[0]


def test_top_k_per_speaker_and_the_source_answer_prompt(tmp_path):
    mem, llm = build(tmp_path)  # k=1: one memory from each speaker's store
    pred = mem.answer(QUESTION)
    answer = [m for p, m in llm.calls if p == "answer"][-1]
    want = Template(QP.ANSWER_INSTRUCTIONS + REF_TAIL).render(
        speaker_1_user_id="Alice", speaker_2_user_id="Bob", question=QUESTION.question,
        speaker_1_memories=json.dumps([f"{S2}: Alice likes green tea"], indent=4),
        speaker_2_memories=json.dumps([f"{S1}: Bob has a dog named Rex"], indent=4))
    assert answer == [{"role": "system", "content": want}]
    assert pred.usage.held_text == llm.count_tokens(pred.meta["context"])


def test_shared_store_is_searched_once_with_top_k(tmp_path):
    mem, llm = build(tmp_path, stores="shared")
    assert all("speaker" not in r.meta for r in mem.store.records("h", "fact"))
    context = mem.answer(QUESTION).meta["context"]
    assert len(context.splitlines()) == 1 and "Memories for user" not in context  # k=1 in all
    answer = [m for p, m in llm.calls if p == "answer"][-1][0]["content"]
    assert f"    Memories:\n\n    {context}\n\n    Question: " in answer
    # one store: Bob's fact was compared with Alice's memory (a decision call the per-speaker run skips)
    assert sum("NEW FACT: " in m[-1]["content"] for _, m in llm.calls) == 2  # per speaker: 1


def test_update_carries_the_date_of_the_updating_message(tmp_path):
    mem, _ = build(tmp_path)
    rec = next(r for r in mem.store.records("h", "fact") if r.meta["speaker"] == "Alice")
    assert rec.text == "Alice likes green tea" and rec.time == S2
    assert rec.meta["created"] == S1 and rec.meta["updated"] == S2
    assert f'"{S2}: Alice likes green tea"' in mem.fact_context(QUESTION)
    change = [c for c in mem.store.changes("h") if c["op"] == "UPDATE"]
    assert len(change) == 1 and change[0]["new"]["meta"]["updated"] == S2


def test_running_summary_counts_in_the_memory_footprint(tmp_path):
    mem, llm = build(tmp_path)
    assert mem.summary == "Alice drinks tea and Bob has a dog named Rex."
    records = sum(llm.count_tokens(r.text) for r in mem.store.records("h"))
    usage = mem.answer(QUESTION).usage
    assert usage.memory_tokens == records + llm.count_tokens(mem.summary) and usage.memory_items == 2


def test_unknown_store_layout_is_one_line_naming_the_key(tmp_path):
    cfg = option_config("memory", {"name": "mem0", "stores": "per_user", "progress": False})
    with pytest.raises(ConfigError, match=r"^memory.stores='per_user' is not a store layout; "
                                          r"use one of per_speaker \| shared$"):
        Mem0(cfg, llm=ScriptedLLM(responder), embedder=BowEmbedder(), workdir=tmp_path)
