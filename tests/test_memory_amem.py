"""A-Mem: notes get LLM attributes; link generation links the new note; memory evolution rewrites a
neighbour's context and tags (old values kept in the change history); retrieval expands links."""
from __future__ import annotations

import json

from omegaconf import OmegaConf

from ctxbench.memory.amem import AMem
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM
from ctxbench.config.compose import option_config

NEW_CONTEXT = "Rex is Alice's dog and later got sick"


def respond(messages, phase):
    user = messages[-1]["content"]
    if user.startswith("Invalid:"):  # the retry with the error shown: the model repeats itself
        user = messages[-3]["content"]
    if phase == "answer":
        return "Rex"
    if user.startswith("Message ("):
        if "adopted" in user:
            return json.dumps({"keywords": ["dog", "Rex"], "context": "Alice got a pet", "tags": ["pets"]})
        return json.dumps({"keywords": ["vet"], "context": "a visit to the vet", "tags": ["health"]})
    if "NEIGHBOURS" in user:
        if "Rex went" in user.split("NEIGHBOURS")[0]:  # second note: link to the dog note and evolve it
            return json.dumps({"links": ["0"], "neighbors": [{"id": "0", "context": NEW_CONTEXT,
                                                             "tags": ["pets", "health"]}]})
        return json.dumps({"links": ["9"], "neighbors": []})  # third: an id not shown (fails the enum)
    raise AssertionError(user)


def history() -> History:
    turns = [Turn("Alice", "I adopted a dog named Rex.", "D1:1"), Turn("Alice", "Rex went to the vet, he is sick.", "D1:2"),
             Turn("Bob", "Sorry to hear that about the vet.", "D1:3")]
    return History(id="h", sessions=[Session("session_1", turns, "2:00 pm on 3 July, 2023")])


def test_links_and_evolution(tmp_path):
    cfg = option_config("memory", {"name": "amem", "k": 1, "k_neighbors": 3, "expand": 2, "progress": False,
                            "query_keywords": False})  # the question's keywords: test_memory_amem_retrieval.py
    mem = AMem(cfg, llm=ScriptedLLM(respond), embedder=BowEmbedder(), workdir=tmp_path)
    mem.ingest(history())
    notes = mem.store.records("h", "note")
    dog, vet, bob = notes
    assert dog.meta["keywords"] == ["dog", "Rex"]
    assert vet.meta["links"] == [dog.id]  # link generation
    assert dog.meta["context"] == NEW_CONTEXT and dog.meta["tags"] == ["pets", "health"]  # evolution
    ev = [c for c in mem.store.changes("h") if c["op"] == "EVOLVE"]
    assert len(ev) == 1 and ev[0]["old"]["meta"]["context"] == "Alice got a pet"
    evolve = mem.output_counts()["structured_output"]["construction"]["by_kind"]["evolve"]
    assert (evolve["calls"], evolve["valid"], evolve["invalid"], evolve["retried"]) == (2, 1, 1, 1)
    assert bob.meta["links"] == []
    # the neighbour's embedding follows its new context
    assert abs(float(dog.emb @ mem.embed(["Alice got a pet"])[0])) < float(
        dog.emb @ mem.embed([NEW_CONTEXT])[0])
    # retrieval: top-1 is the vet note; its link brings the dog note in
    pred = mem.answer(Question("q", "Rex went to the vet sick", "Rex"))
    lines = pred.meta["context"].split("\n")
    assert "vet" in lines[0] and "adopted a dog" in lines[1]
    assert pred.usage.construction_calls == 3 + 2 + 1  # 3 notes + 2 evolution calls + 1 retry with the error
