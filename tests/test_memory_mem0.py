"""Mem0: the update phase applies ADD/UPDATE/DELETE/NOOP to the store exactly; invented ids are
rejected and counted; ingestion resumes after a crash without repeating applied LLM calls."""
from __future__ import annotations

import json
import re

import pytest
from omegaconf import OmegaConf

from ctxbench.memory.mem0 import Mem0
from ctxbench.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text

PAIRS = {  # first turn of each pair -> facts the "LLM" extracts
    "pair one": ["Alice likes tea", "Alice lives in Paris"],
    "pair two": ["Alice likes green tea"],
    "pair three": ["Alice moved away from Paris"],
    "pair four": ["Alice enjoys green tea", "Alice has a cat"],
}
DECISIONS = {  # fact -> (event, text of the memory it targets, new text)
    "Alice lives in Paris": ("ADD", None, None),
    "Alice likes green tea": ("UPDATE", "Alice likes tea", "Alice likes green tea"),
    "Alice moved away from Paris": ("DELETE", "Alice lives in Paris", None),
    "Alice enjoys green tea": ("NOOP", "Alice likes green tea", None),
    "Alice has a cat": ("DELETE", "INVENTED", None),
}


def history() -> History:
    turns = []
    for p in PAIRS:
        turns += [Turn("Alice", f"{p} text", f"D1:{len(turns) + 1}"), Turn("Bob", "ok", f"D1:{len(turns) + 2}")]
    return History(id="h1", sessions=[Session("session_1", turns, "1:56 pm on 8 May, 2023")])


def responder(fail_on_extraction: int | None = None):
    seen = {"extract": 0}

    def respond(messages, phase):
        text = prompt_text(messages)
        if phase == "answer":
            return "answer"
        if "NEW MESSAGES" in text:
            seen["extract"] += 1
            if fail_on_extraction is not None and seen["extract"] == fail_on_extraction:
                raise RuntimeError("simulated crash")
            new = text.split("NEW MESSAGES")[-1]
            key = next(k for k in PAIRS if k in new)
            return "Sure!\n```json\n" + json.dumps({"facts": PAIRS[key]}) + "\n```"
        if "NEW FACT" in text:
            fact = text.split("NEW FACT: ")[1].split("\n")[0]
            event, target, new_text = DECISIONS[fact]
            shown = dict(re.findall(r"^(\d+): (.*)$", text.split("EXISTING MEMORIES:")[1], re.M))
            if target == "INVENTED":
                rid = str(len(shown) + 40)
            else:
                rid = next((i for i, t in shown.items() if t == target), "")
            return json.dumps({"event": event, "id": rid, "text": new_text or fact})
        return "Alice and Bob chat."  # running summary

    return respond


def make(tmp_path, llm):
    cfg = OmegaConf.create({"name": "mem0", "k": 5, "m": 4, "s": 10, "progress": False})
    return Mem0(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)


def test_update_events_applied_exactly(tmp_path):
    llm = ScriptedLLM(responder())
    mem = make(tmp_path, llm)
    mem.ingest(history())
    live = [r.text for r in mem.store.records("h1", "fact")]
    assert live == ["Alice likes green tea"]
    ops = [(c["op"], (c["old"] or {}).get("text"), (c["new"] or {}).get("text")) for c in mem.store.changes("h1")]
    assert ops == [("ADD", None, "Alice likes tea"), ("ADD", None, "Alice lives in Paris"),
                   ("UPDATE", "Alice likes tea", "Alice likes green tea"),
                   ("DELETE", "Alice lives in Paris", None)]
    assert mem.counts["invented_ids"] == 1 and mem.counts["NOOP"] == 1
    assert mem.counts["ADD"] == 2 and mem.counts["UPDATE"] == 1 and mem.counts["DELETE"] == 1
    # the deleted memory is gone from the index too; the updated one is found by its new text
    assert len(mem.index) == 1
    # every construction call is counted by phase; the answer is counted apart
    pred = mem.answer(Question("q1", "What tea does Alice like?", "green tea"))
    assert "Alice likes green tea" in pred.meta["context"]
    assert pred.usage.answer_calls == 1 and pred.usage.construction_calls == llm.meter.get("construction").calls
    assert pred.usage.context_tokens == llm.count_tokens(pred.meta["context"])
    assert pred.usage.memory_items == 1 and pred.usage.extra["invented_ids"] == 1


def test_extraction_sees_summary_and_last_m_messages(tmp_path):
    llm = ScriptedLLM(responder())
    make(tmp_path, llm).ingest(history())
    extracts = [prompt_text(m) for p, m in llm.calls if "NEW MESSAGES" in prompt_text(m)]
    assert len(extracts) == 4
    last = extracts[-1].split("Recent messages:")[1].split("NEW MESSAGES (")[0]
    assert last.count("\n") >= 4 and "pair one" not in last and "pair three" in last  # m=4 turns


def test_resume_after_crash(tmp_path):
    ref = make(tmp_path / "ref", ScriptedLLM(responder()))
    ref.ingest(history())
    want = [(r.text, r.meta) for r in ref.store.records("h1", include_deleted=True)]

    crashing = ScriptedLLM(responder(fail_on_extraction=3))
    mem = make(tmp_path / "run", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        mem.ingest(history())
    mem.close()
    done_before = len(crashing.calls) - 1  # the failing call was not applied

    again = ScriptedLLM(responder())
    mem2 = make(tmp_path / "run", again)
    mem2.ingest(history())
    assert [(r.text, r.meta) for r in mem2.store.records("h1", include_deleted=True)] == want
    new_prompts = [prompt_text(m) for _, m in again.calls]
    assert not any("pair one" in p.split("NEW MESSAGES")[-1] for p in new_prompts if "NEW MESSAGES" in p)
    assert not any("pair two" in p.split("NEW MESSAGES")[-1] for p in new_prompts if "NEW MESSAGES" in p)
    # no LLM call is repeated: the calls before the crash plus those after it are exactly a full run's
    assert done_before + len(again.calls) == len(ref.llm.calls)
    # cost survives the restart: the total equals an uninterrupted run's
    assert mem2.construction["calls"] == ref.construction["calls"]
    # a third run has nothing left to do and makes no call
    third = ScriptedLLM(responder())
    mem2.close()
    make(tmp_path / "run", third).ingest(history())
    assert third.calls == []
