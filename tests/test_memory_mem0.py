"""Mem0: the update phase applies ADD/UPDATE/DELETE/NOOP to the store exactly (with one store per
speaker, the paper setting, and with the one shared store); an id that was not shown fails the
update schema's enum (counted invalid, never applied); extraction sees the running summary of the
sessions before and the last ``m`` messages; ingestion resumes after a crash without repeating
applied LLM calls. Per-speaker stores and retrieval: tests/test_memory_mem0_speakers.py."""
from __future__ import annotations

import json
import re

import pytest
from omegaconf import OmegaConf

from ctxbench.memory.mem0 import Mem0
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text
from ctxbench.config.compose import option_config

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
    seen = {"extract": 0, "summary": 0}

    def respond(messages, phase):
        text = prompt_text(messages)
        if phase == "answer":
            return "answer"
        if "New messages (" in text:
            seen["extract"] += 1
            if fail_on_extraction is not None and seen["extract"] == fail_on_extraction:
                raise RuntimeError("simulated crash")
            new = text.split("New messages (")[-1]
            key = next(k for k in PAIRS if k in new)
            return "Sure!\n```json\n" + json.dumps({"facts": PAIRS[key]}) + "\n```"
        if "Updated summary:" in text:
            seen["summary"] += 1
            return f"Running summary number {seen['summary']}: Alice and Bob chat."
        if "NEW FACT" in text:
            fact = text.split("NEW FACT: ")[1].split("\n")[0]
            event, target, new_text = DECISIONS[fact]
            shown = dict(re.findall(r"^(\d+): (.*)$", text.split("EXISTING MEMORIES:")[1], re.M))
            if target == "INVENTED":
                rid = str(len(shown) + 40)
            else:
                rid = next((i for i, t in shown.items() if t == target), "")
            reply = {"event": event, "id": rid, "text": new_text or fact}
            keep = {"ADD": [], "NOOP": [], "DELETE": ["id"], "UPDATE": ["id", "text"]}[event]
            return json.dumps({"event": event, **{k: reply[k] for k in keep}})
        raise AssertionError(f"unexpected prompt: {text[:80]}")

    return respond


def make(tmp_path, llm, **over):
    cfg = option_config("memory", {"name": "mem0", "k": 5, "m": 4, "s": 10, "progress": False, **over})
    return Mem0(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)


@pytest.mark.parametrize("stores", ["per_speaker", "shared"])
def test_update_events_applied_exactly(tmp_path, stores):
    llm = ScriptedLLM(responder())
    mem = make(tmp_path, llm, stores=stores)
    mem.ingest(history())
    assert mem.stores == stores
    extracts = [prompt_text(m) for _, m in llm.calls if "New messages (" in prompt_text(m)]
    assert len(extracts) == 4  # one per pair, per-speaker stores too (each fact routed to its speaker's)
    live = [r.text for r in mem.store.records("h1", "fact")]
    assert live == ["Alice likes green tea"]
    ops = [(c["op"], (c["old"] or {}).get("text"), (c["new"] or {}).get("text")) for c in mem.store.changes("h1")]
    assert ops == [("ADD", None, "Alice likes tea"), ("ADD", None, "Alice lives in Paris"),
                   ("UPDATE", "Alice likes tea", "Alice likes green tea"),
                   ("DELETE", "Alice lives in Paris", None)]
    update = mem.output_counts()["structured_output"]["construction"]["by_kind"]["update"]
    assert update["invalid"] == 1 and update["valid"] == 4 and mem.counts["NOOP"] == 1  # the invented id
    invented = [c for c in llm.calls if "NEW FACT: Alice has a cat" in prompt_text(c[1])]
    assert len(invented) == 2  # asked once more with the error shown, then given up (the same reply)
    assert mem.counts["ADD"] == 2 and mem.counts["UPDATE"] == 1 and mem.counts["DELETE"] == 1
    # the deleted memory is gone from the index too; the updated one is found by its new text
    assert len(mem.index) == 1
    # every construction call is counted by phase; the answer is counted apart
    pred = mem.answer(Question("q1", "What tea does Alice like?", "green tea"))
    assert "Alice likes green tea" in pred.meta["context"]
    assert pred.usage.answer_calls == 1 and pred.usage.construction_calls == llm.meter.get("construction").calls
    assert pred.usage.held_text == llm.count_tokens(pred.meta["context"])
    assert pred.usage.memory_items == 1


def two_sessions() -> History:
    """history()'s pairs one and two in session 1, three and four in session 2 (a day later)."""
    turns = history().sessions[0].turns
    return History(id="h1", sessions=[Session("session_1", turns[:4], "1:56 pm on 8 May, 2023"),
                                      Session("session_2", turns[4:], "2:00 pm on 9 May, 2023")])


def test_extraction_sees_summary_and_last_m_messages(tmp_path):
    llm = ScriptedLLM(responder())
    mem = make(tmp_path, llm, stores="shared")
    mem.ingest(two_sessions())
    extracts = [m for p, m in llm.calls if "New messages (" in prompt_text(m)]
    assert len(extracts) == 4
    assert all(m[0]["role"] == "system" and "Zorvan" in m[1]["content"] and m[2]["role"] == "assistant"
               for m in extracts)  # the example is its own exchange, before the conversation
    # the running summary written after session 1 is what session 2's extraction is shown
    first = "Running summary number 1: Alice and Bob chat."
    summaries = [prompt_text(m) for _, m in llm.calls if "Updated summary:" in prompt_text(m)]
    assert len(summaries) == 2 and f"Current summary: {first}" in summaries[1]  # the summary is running
    assert [m[-1]["content"].startswith("Summary: (none)\n") for m in extracts] == [True, True, False, False]
    assert all(m[-1]["content"].startswith(f"Summary: {first}\n") for m in extracts[2:])
    assert mem.summary == "Running summary number 2: Alice and Bob chat."
    last = extracts[-1][-1]["content"].split("Recent messages:")[1].split("New messages (")[0]
    assert last.count("\n") >= 4 and "pair one" not in last and "pair three" in last  # m=4 turns


def test_resume_after_crash(tmp_path):
    ref = make(tmp_path / "ref", ScriptedLLM(responder()))
    ref.ingest(history())
    want = [(r.text, r.meta) for r in ref.store.records("h1", include_deleted=True)]

    crashing = ScriptedLLM(responder(fail_on_extraction=3))  # pair three (the step's first call)
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
    assert not any("pair one" in p.split("New messages (")[-1] for p in new_prompts if "New messages (" in p)
    assert not any("pair two" in p.split("New messages (")[-1] for p in new_prompts if "New messages (" in p)
    # no LLM call is repeated: the calls before the crash plus those after it are exactly a full run's
    assert done_before + len(again.calls) == len(ref.llm.calls)
    # cost survives the restart: the total equals an uninterrupted run's
    assert mem2.construction["calls"] == ref.construction["calls"]
    # a third run has nothing left to do and makes no call
    third = ScriptedLLM(responder())
    mem2.close()
    make(tmp_path / "run", third).ingest(history())
    assert third.calls == []
