"""Mem0g: a contradicted edge is kept, marked invalid with the conversation time, and the answer to
"where does Alice work now" comes from the valid edge; a conflict id that was not shown fails the
schema's enum (counted invalid, nothing invalidated)."""
from __future__ import annotations

import json
import re

import pytest

from omegaconf import OmegaConf

from ctxbench.memory.mem0g import Mem0g
from ctxbench.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text

S1, S2 = "10:00 am on 1 March, 2023", "10:00 am on 9 June, 2023"
REL = {"Google": ("alice", "works_at", "google"), "Meta": ("alice", "works_at", "meta"),
       "chess": ("bob", "plays", "chess")}  # names among the entities shown (the schema's enum)


def responder(invent: bool = False):
    def respond(messages, phase):
        text = prompt_text(messages)
        user = messages[-1]["content"]
        if phase == "answer":  # answer from the current relations only
            cur = text.split("Relations (current):")[1].split("\n\n")[0] if "Relations (current):" in text else ""
            m = re.search(r"alice works_at (\w+)", cur)
            return m.group(1) if m else "Not mentioned"
        if "New messages (" in user:
            return '{"facts": []}'
        if "Entities:" in user:  # relation extraction
            return json.dumps({"relations": [dict(zip(("source", "relation", "target"), REL[k]))
                                             for k in REL if k in user.split("Messages")[1]]})
        if user.startswith("Messages ("):  # entity extraction
            return json.dumps({"entities": ["Alice", "Google", "Meta", "Bob", "chess"]})
        if "EXISTING:" in user:
            if invent:
                return '{"outdated": ["17"]}'
            shown = dict((t, i) for i, t in re.findall(r"^(\d+): (.*)$", user.split("NEW:")[0], re.M))
            return json.dumps({"outdated": [shown["alice works_at google"]]}
                              if "alice works_at meta" in user.split("NEW:")[1] else {"outdated": []})
        return "summary"
    return respond


def history() -> History:
    return History(id="h", sessions=[
        Session("session_1", [Turn("Alice", "I work at Google.", "D1:1"), Turn("Bob", "I plays chess.", "D1:2")], S1),
        Session("session_2", [Turn("Alice", "I moved: I work at Meta now.", "D2:1"), Turn("Bob", "Congrats!", "D2:2")], S2)])


def make(tmp_path, llm):
    cfg = OmegaConf.create({"name": "mem0g", "k": 5, "node_threshold": 0.9, "progress": False,
                            "graph": {"backend": "ladybug"}})
    return Mem0g(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)


def test_invalidated_edge_kept_and_answer_from_valid(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    every = mem.graph.edges("h", valid_only=False)
    by = {e.text(): e for e in every}
    assert set(by) == {"alice works_at google", "bob plays chess", "alice works_at meta"}
    old = by["alice works_at google"]
    assert not old.valid and old.invalidated == S2 and old.created == S1  # kept, with its time
    assert by["alice works_at meta"].valid and by["bob plays chess"].valid
    # node resolution: "Alice" and "alice" are one node
    assert by["alice works_at meta"].src == old.src
    assert mem.counts["edges_invalidated"] == 1
    pred = mem.answer(Question("q", "Where does Alice work now?", "Meta"))
    assert pred.text == "meta"
    assert "google" not in pred.meta["context"]
    assert pred.usage.memory_items == 2  # valid edges (no facts extracted)
    mem.close()


def test_invented_conflict_id_rejected(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder(invent=True)))
    mem.ingest(history())
    conflicts = mem.output_counts()["structured_output"]["construction"]["by_kind"]["conflicts"]
    assert conflicts["invalid"] >= 1 and conflicts["valid"] == 0
    assert all(e.valid for e in mem.graph.edges("h", valid_only=False))
    mem.close()


def test_schemas_restrict_names_and_ids_to_those_shown():
    from ctxbench.llm.schema import SchemaError, parse_reply
    from ctxbench.memory.prompts import mem0g as P

    rel = P.relations_schema(["alice", "google"], 2)
    ok = {"relations": [{"source": "alice", "relation": "works_at", "target": "google"}]}
    assert parse_reply(json.dumps(ok), rel) == ok
    for bad in ({"source": "carol", "relation": "works_at", "target": "google"},  # not an entity shown
                {"source": "alice", "relation": "Works At", "target": "google"}):  # not snake_case
        with pytest.raises(SchemaError):
            parse_reply(json.dumps({"relations": [bad]}), rel)
    with pytest.raises(SchemaError):
        parse_reply('{"outdated": ["2"]}', P.outdated_schema(["0", "1"]))


def test_retrieval_entity_traversal_and_triplet_match(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    mem.k_graph = 1
    # entity-centred: "Bob" seeds the bob node even though the triplet embedding ranks it first anyway
    assert [e.text() for e in mem.graph_edges("What does Bob do?")] == ["bob plays chess"]
    assert [e.text() for e in mem.graph_edges("Who works at meta?")] == ["alice works_at meta"]
    mem.close()
