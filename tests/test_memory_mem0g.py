"""Mem0g at its DEFAULT settings (node_threshold 0.9, search_threshold 0.7, include_invalid):
a contradicted edge is kept, marked invalid with the conversation time, and retrieved apart with
its validity interval; "where does Alice work now" is answered from the valid edge; a conflict id
that was not shown fails the schema's enum (counted invalid, nothing invalidated); entities keep
their extracted type and nodes/edges their conversation times; the footprint counts the whole graph."""
from __future__ import annotations

import json
import re

import pytest

from omegaconf import OmegaConf

from ctxbench.memory.mem0g import Mem0g
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

S1, S2 = "10:00 am on 1 March, 2023", "10:00 am on 9 June, 2023"
REL = {"Google": ("alice", "works_at", "google"), "Meta": ("alice", "works_at", "meta"),
       "chess": ("bob", "plays", "chess")}  # names among the entities shown (the schema's enum)
TYPES = {"Alice": "person", "Google": "organisation", "Meta": "organisation", "Bob": "person", "chess": "game"}


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
            return json.dumps({"entities": [{"entity": e, "entity_type": t} for e, t in TYPES.items()]})
        if "EXISTING:" in user:
            if invent:
                return '{"outdated": ["17"]}'
            shown = dict((t, i) for i, t in re.findall(r"^(\d+): (.*)$", user.split("NEW:")[0], re.M))
            hit = "alice works_at google" in shown and "alice works_at meta" in user.split("NEW:")[1]
            return json.dumps({"outdated": [shown["alice works_at google"]] if hit else []})
        return "summary"
    return respond


def history() -> History:
    return History(id="h", sessions=[
        Session("session_1", [Turn("Alice", "I work at Google.", "D1:1"), Turn("Bob", "I plays chess.", "D1:2")], S1),
        Session("session_2", [Turn("Alice", "I moved: I work at Meta now.", "D2:1"), Turn("Bob", "Congrats!", "D2:2")], S2)])


def make(tmp_path, llm, embedder=None, **over):
    """Mem0g at the packaged defaults (conf/memory/mem0g.yaml), only test plumbing overridden."""
    cfg = load_conf_file("conf/memory/mem0g.yaml")
    cfg.merge_with({"k": 5, "progress": False, **over})
    return Mem0g(cfg, llm=llm, embedder=embedder or BowEmbedder(), workdir=tmp_path)


def test_defaults_are_mem0s_thresholds(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    assert (mem.node_threshold, mem.search_threshold, mem.include_invalid) == (0.9, 0.7, True)
    assert mem.max_conflict_edges == 100
    mem.close()


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
    mem.close()


def test_invalidated_edge_retrieved_with_its_validity_interval(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    ctx = mem.retrieve(Question("q", "Where did Alice work in April 2023?", "Google"))
    current = ctx.split("Relations (current):\n")[1].split("\n\n")[0]
    past = ctx.split("Relations (no longer valid):\n")[1].split("\n\n")[0]
    assert f"- alice works_at meta (since {S2})" in current.splitlines()
    assert past.splitlines() == [f"- alice works_at google (valid {S1} – {S2})"]
    mem.close()
    off = make(tmp_path / "off", ScriptedLLM(responder()), include_invalid=False)
    off.ingest(history())
    ctx = off.retrieve(Question("q", "Where did Alice work in April 2023?", "Google"))
    assert "google" not in ctx and "no longer valid" not in ctx and "alice works_at meta" in ctx
    off.close()


def test_invented_conflict_id_rejected(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder(invent=True)))
    mem.ingest(history())
    conflicts = mem.output_counts()["structured_output"]["construction"]["by_kind"]["conflicts"]
    assert conflicts["invalid"] >= 1 and conflicts["valid"] == 0
    assert all(e.valid for e in mem.graph.edges("h", valid_only=False))
    mem.close()


def test_entity_types_and_times_are_stored(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    nodes = {n.name: n for n in mem.graph.nodes("h")}
    assert {n: x.type for n, x in nodes.items()} == {"alice": "person", "google": "organisation",
                                                     "bob": "person", "chess": "game", "meta": "organisation"}
    assert nodes["alice"].created == S1 and nodes["alice"].updated == S2 and nodes["alice"].mentions == 2
    assert nodes["meta"].created == nodes["meta"].updated == S2 and nodes["meta"].mentions == 1
    assert nodes["google"].updated == S1
    meta = next(e for e in mem.graph.edges("h") if e.text() == "alice works_at meta")
    assert (meta.created, meta.updated, meta.mentions) == (S2, "", 1)
    mem.close()


def test_restated_edge_is_touched_not_duplicated(tmp_path):
    h = history()
    h.sessions.append(Session("session_3", [Turn("Alice", "Still at Meta.", "D3:1")], "9 July, 2023"))
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(h)
    meta = [e for e in mem.graph.edges("h", valid_only=False) if e.text() == "alice works_at meta"]
    assert len(meta) == 1 and meta[0].updated == "9 July, 2023" and meta[0].mentions == 2
    assert mem.counts["edge_duplicates"] == 1
    mem.close()


def test_footprint_counts_the_whole_graph(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    nodes, edges = mem.graph.nodes("h"), mem.graph.edges("h", valid_only=False)
    assert len(nodes) == 5 and len(edges) == 3 and sum(not e.valid for e in edges) == 1
    facts = mem.store.records("h")  # the responder extracts no facts: the summaries only
    want_items = len(facts) + 5 + 3  # every node and every edge, the invalidated one included
    want_toks = (sum(len(r.text.split()) for r in facts) + sum(len(n.text().split()) for n in nodes)
                 + sum(len(e.line().split()) for e in edges) + len(mem.summary.split()))  # + Mem0's summary
    assert mem.summary and mem.memory_stats() == (want_items, want_toks)
    assert "alice (person)" in [n.text() for n in nodes]  # the node's type is part of what it holds
    pred = mem.answer(Question("q", "Where does Alice work now?", "Meta"))
    assert (pred.usage.memory_items, pred.usage.memory_tokens) == (want_items, want_toks)
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


def test_entity_schema_requires_a_bounded_type():
    from ctxbench.llm.schema import SchemaError, parse_reply
    from ctxbench.memory.prompts import mem0g as P

    ent = P.entities_schema(2)
    ok = {"entities": [{"entity": "Caroline's mom", "entity_type": "person"}]}
    assert parse_reply(json.dumps(ok), ent) == ok
    for bad in ({"entities": ["Caroline"]},  # no type
                {"entities": [{"entity": "Caroline", "entity_type": "Person Name"}]},  # not snake_case
                {"entities": [{"entity": "Caroline", "entity_type": "x" * (P.TYPE_CHARS + 1)}]},  # too long
                {"entities": [{"entity": "a" + str(i), "entity_type": "person"} for i in range(3)]}):  # > max
        with pytest.raises(SchemaError):
            parse_reply(json.dumps(bad), ent)


def test_retrieval_entity_traversal_and_triplet_match(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    mem.k_graph = 1
    # entity-centred: "Bob" seeds the bob node even though the triplet embedding ranks it first anyway
    assert [e.text() for e in mem.graph_edges("What does Bob do?")] == ["bob plays chess"]
    assert [e.text() for e in mem.graph_edges("Who works at meta?")] == ["alice works_at meta"]
    mem.close()


def test_older_graph_file_is_refused_in_one_line(tmp_path):
    import ladybug

    from ctxbench.memory.stores.graph import LadybugGraph
    from ctxbench.memory.stores.records import StoreError

    path = tmp_path / "graph.lbdb"
    db = ladybug.Database(str(path))
    conn = ladybug.Connection(db)
    conn.execute("CREATE NODE TABLE Entity(id INT64, hid STRING, name STRING, emb STRING, PRIMARY KEY(id))")
    conn.execute("CREATE REL TABLE Rel(FROM Entity TO Entity, id INT64, hid STRING, relation STRING, "
                 "valid BOOLEAN, created STRING, invalidated STRING, emb STRING)")
    conn.close()
    db.close()
    with pytest.raises(StoreError) as e:
        LadybugGraph(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "older ctxbench" in msg and "Entity.type" in msg


def test_paper_experiment_uses_the_faithful_settings():
    import os

    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.abspath("conf"), version_base=None):
        for scale in ("cpu", "paper"):
            c = compose("eval", overrides=["experiment=mem0_locomo_table1_mem0g", f"scale/mem0={scale}"])
            m = c.memory
            assert (m.name, m.node_threshold, m.search_threshold, m.max_conflict_edges, m.include_invalid) == (
                "mem0g", 0.9, 0.7, 100, True)


def test_entity_schema_constrains_a_random_hf_model():
    """The typed entity schema compiles for grammar-constrained decoding and bounds the reply: a tiny
    random model (valid only because it is enforced) replies with typed entities."""
    from ctxbench.llm.hf import HFChatLLM
    from ctxbench.llm.schema import parse_reply
    from ctxbench.memory.prompts import mem0g as P

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 512}))
    schema = P.entities_schema(2)
    r = llm.chat(P.entity_messages("1 May, 2023", "Caroline: I paint."), max_new_tokens=240, schema=schema)
    assert r.constrained and not r.truncated, r.text
    out = parse_reply(r.text, schema)
    assert all(set(e) == {"entity", "entity_type"} for e in out["entities"])
