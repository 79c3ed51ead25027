"""Mem0g (the graph variant of Mem0; mem0ai/mem0 v0.1.x graph memory, ``mem0/memory/graph_memory.py``,
the versions of the paper, arXiv 2504.19413 §2.2).

Per message pair (``MemoryGraph.add``): entity extraction with types → relation triplets among
those entities → the existing edges around the extracted entities (``_search_graph_db``: nodes whose
embedding has cosine ≥ ``search_threshold`` (0.7, mem0's ``self.threshold``) with an extracted
entity, and their incoming and outgoing edges, most similar node first, then most recent; at most
``max_conflict_edges``) → conflict detection (the LLM marks existing edges that the new triplets
contradict; ids remapped to small integers, an enum of those shown) → contradicted edges are marked
invalid with the conversation time and kept (the paper's soft invalidation; mem0's code deletes
them) → node resolution for the new triplets (``_add_entities``: an entity joins an existing node
when their cosine ≥ ``node_threshold``, 0.9 in ``_search_source_node`` / ``_search_destination_node``)
→ new edges are added, a restated valid edge is touched (``updated``, ``mentions``).

Resume: each graph write names its ingestion step (:mod:`ctxbench.memory.stores.graph`); before a
rerun continues after the records' last committed step, the graph writes of the step a crash cut
short are undone (``roll_back``), so the rerun builds the graph an uninterrupted run builds; the
writes of a step whose LLM call failed are undone the same way when the base class abandons it.

Retrieval combines entity-centred traversal (nodes matching phrases of the question at
``search_threshold``, their edges) and triplet matching (question embedding vs triplet embeddings).
With ``include_invalid`` (the paper setting) invalidated edges compete too and are shown apart
with their validity interval ("valid <from> – <invalidated at>"), for temporal questions.
As in the paper, the answer also sees Mem0's facts (``use_facts``).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from ctxbench.config.schemas.memory import Mem0gMemory
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question

from ctxbench.memory.mem0 import Mem0, render_turns
from ctxbench.memory.prompts import mem0g as P
from ctxbench.memory.stores.graph import Edge, Node, open_graph
from ctxbench.memory.stores.retrieval_notes import note_retrieval, note_retrieved

_STOP = set("a an the and or of to in on at for with from by is are was were be been do does did what "
            "when where who whom which how why that this these those it its his her their my your our "
            "now ever has have had will would can could should about as into".split())


def norm_name(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def norm_relation(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.strip().lower()).strip("_")


@register("memory", "mem0g")
class Mem0g(Mem0):
    Settings = Mem0gMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "mem0g"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.graph = open_graph(cfg.graph, self.workdir)
        self.node_threshold = float(cfg.node_threshold)
        self.search_threshold = float(cfg.search_threshold)
        self.include_invalid = cfg.include_invalid
        self.max_conflict_edges = cfg.max_conflict_edges
        self.use_facts = cfg.use_facts
        self.k_graph = cfg.k_graph

    def steps(self, history) -> list[tuple]:
        self._step_list = super().steps(history)  # an edge's step → the message pair it came from
        return self._step_list

    def edge_provenance(self, e: Edge) -> dict:
        """The session and turns of the message pair whose step added edge ``e`` (none when unknown)."""
        steps = getattr(self, "_step_list", [])
        if not 0 <= e.step < len(steps) or steps[e.step][0] != "pair":
            return {"session": None, "turns": []}
        _, si, ti = steps[e.step]
        s = self._sessions[si]
        return {"session": s.id, "turns": [t.id for t in s.turns[ti:ti + 2]]}

    def apply(self, step: tuple, i: int) -> None:
        if step[0] == "summary" or self.use_facts:
            super().apply(step, i)
        if step[0] != "pair":
            return
        _, si, ti = step
        s = self._sessions[si]
        self.add_graph(render_turns(s.turns[ti:ti + 2]), s.date, step=i)

    # ---- construction ----------------------------------------------------------------------------
    def extract_entities(self, text: str, date: str) -> dict[str, str]:
        """Entity name → type (mem0 ``_retrieve_nodes_from_data``: its ``entity_type_map``)."""
        ents = self.call(P.entity_messages(date, text), P.entities_schema(self.cfg.max_entities),
                         kind="entities", max_new_tokens=self.cfg.entity_max_tokens)
        types: dict[str, str] = {}
        for e in (ents or {}).get("entities", []):
            n = norm_name(e["entity"])
            if n and n not in types:
                types[n] = norm_relation(e["entity_type"])
        return types

    def add_graph(self, text: str, date: str, *, step: int) -> None:
        """The graph writes of one message pair, made at ingestion step ``step`` (their undo tag)."""
        types = self.extract_entities(text, date)
        if not types:
            return
        names = list(types)
        rels = self.call(P.relation_messages(date, text, names),
                         P.relations_schema(names, self.cfg.max_relations), kind="relations",
                         max_new_tokens=self.cfg.relation_max_tokens)
        if not rels:
            return
        triplets = []
        for r in rels["relations"]:
            src, rel, dst = norm_name(r["source"]), norm_relation(r["relation"]), norm_name(r["target"])
            if P.copies_instructions(rel):
                self.counts["copied_instructions"] += 1
            elif src and rel and dst and src != dst:
                triplets.append((src, rel, dst))
        if not triplets:
            return
        self.detect_conflicts(triplets, names, date, step=step)
        node_of = {n: self.resolve(n, types.get(n, ""), date, step=step)
                   for n in dict.fromkeys([t[0] for t in triplets] + [t[2] for t in triplets])}
        existing = {(e.src, e.relation, e.dst): e for e in self.graph.edges(self.hid, list(set(node_of.values())))}
        embs = self.embed([f"{a} {r} {b}" for a, r, b in triplets])
        for (a, r, b), e in zip(triplets, embs):
            key = (node_of[a], r, node_of[b])
            if key in existing:
                if existing[key] is not None:  # restated (mem0: ON MATCH SET r.mentions + 1)
                    self.graph.touch_edge(existing[key].id, date, step=step)
                    existing[key] = None  # once per pair
                self.counts["edge_duplicates"] += 1
                continue
            self.graph.add_edge(self.hid, key[0], r, key[2], date, e, step=step)
            existing[key] = None
            self.counts["edges_added"] += 1

    def resolve(self, name: str, type_: str = "", date: str = "", *, step: int) -> int:
        """The node for ``name``: the most similar existing one if its cosine ≥ ``node_threshold``
        (touched: ``updated`` = ``date``, one more mention), else a new node of type ``type_``."""
        emb = self.embed([name])[0]
        nodes = self.graph.nodes(self.hid)
        if nodes:
            sims = np.stack([n.emb for n in nodes]) @ emb
            j = int(np.argmax(sims))
            if sims[j] >= self.node_threshold:
                self.counts["nodes_resolved"] += 1
                self.graph.touch_node(nodes[j].id, date, type_, step=step)
                return nodes[j].id
        self.counts["nodes_added"] += 1
        return self.graph.add_node(self.hid, name, emb, type_, date, step=step)

    def neighbourhood(self, names: list[str]) -> list[Edge]:
        """The valid edges around ``names`` that conflict detection sees (mem0 ``_search_graph_db``).

        Nodes whose cosine with any of ``names`` is ≥ ``search_threshold`` are matched; their
        incoming and outgoing valid edges are ranked by the best similarity of an endpoint (as
        mem0's ``ORDER BY similarity DESC``), then most recent first (higher id = learnt later);
        the first ``max_conflict_edges`` are kept (mem0: ``limit=100`` per entity). Never "the
        oldest N": a relation learnt late is shown before older ones of an equally similar node.
        """
        nodes = self.graph.nodes(self.hid)
        if not nodes or not names or self.max_conflict_edges <= 0:
            return []
        sims = (self.embed(names) @ np.stack([n.emb for n in nodes]).T).max(axis=0)  # best per node
        near = {n.id: float(s) for n, s in zip(nodes, sims) if s >= self.search_threshold}
        if not near:
            return []
        edges = self.graph.edges(self.hid, list(near))
        rank = {e.id: max(near.get(e.src, -1.0), near.get(e.dst, -1.0)) for e in edges}
        edges.sort(key=lambda e: (-rank[e.id], -e.id))
        return edges[: self.max_conflict_edges]

    def detect_conflicts(self, triplets: list[tuple[str, str, str]], names: list[str], date: str, *,
                         step: int) -> None:
        old = self.neighbourhood(names)
        if not old:
            return
        idmap = {str(j): e for j, e in enumerate(old)}
        shown = [(str(j), e.text()) for j, e in enumerate(old)]
        out = self.call(P.conflict_messages(shown, [f"{a} {r} {b}" for a, r, b in triplets]),
                        P.outdated_schema(list(idmap)), kind="conflicts",
                        max_new_tokens=self.cfg.conflict_max_tokens)
        if not out:
            return
        for key in dict.fromkeys(out["outdated"]):  # the schema's enum: only ids that were shown
            self.graph.invalidate(idmap[key].id, date, step=step)
            self.counts["edges_invalidated"] += 1

    # ---- the estimate (eval estimate=true) ---------------------------------------------------------
    @property
    def estimates_facts(self) -> bool:
        return bool(self.use_facts)

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Mem0's plan (:meth:`Mem0.estimate_calls`: facts with ``use_facts``, the running summary) and
        per message pair the graph's calls (:meth:`estimate_pair`); the answer adds min(k_graph, edges)
        relations (:meth:`estimate_context`)."""
        sessions = self.limit(history)
        self._est_edges = 0.0
        self._est_date = next((s.date for s in sessions if s.date), "")
        text = " ".join(t.text for s in sessions for t in s.turns)
        self._est_word = self.llm.count_tokens(text) / max(1, len(text.split()))
        yield from super().estimate_calls(history, questions)

    def _est_sizes(self) -> tuple[int, int]:
        """(an entity name's, a relation line's) assumed tokens: a name two words, a relation line two names
        and a two-word relation, a word the history's mean tokens per word."""
        name = max(1, round(2 * self._est_word))
        return name, 2 * name + max(1, round(2 * self._est_word))

    def estimate_pair(self, session: Any, pair: list) -> Any:
        """One pair's graph calls (:meth:`add_graph`): the entity call (exact: the pair and its date); with
        ``estimate_entities_per_pair`` > 0 the relation call (the entity list assumed that many names);
        with ``estimate_relations_per_pair`` > 0 too, from the second such pair on one conflict call showing
        min(max_conflict_edges, edges so far) edges, the edges so far counted as that many per pair (no
        duplicates, every edge near an extracted entity: an upper bound). Embeddings: the entities
        (neighbourhood), the new nodes' names and the triplets, all model output."""
        ents = float(self.cfg.estimate_entities_per_pair)
        rels = float(self.cfg.estimate_relations_per_pair)
        name, line = self._est_sizes()
        text = render_turns(pair)
        yield planned(self.llm, "construction", P.entity_messages(session.date, text), self.cfg.entity_max_tokens,
                      "mem0g.entities", schema=P.entities_schema(self.cfg.max_entities))
        if ents <= 0:
            return
        note = (f"estimate_entities_per_pair={ents:g}, estimate_relations_per_pair={rels:g} (assumed); a name "
                f"{name} tokens, a relation {line}")
        yield planned(self.llm, "construction", P.relation_messages(session.date, text, []),
                      self.cfg.relation_max_tokens, "mem0g.relations", exact=False, note=note,
                      extra_tokens=int(round(ents * (name + 1))))
        if rels <= 0:
            return
        shown = min(int(self.max_conflict_edges), int(self._est_edges))
        if shown:
            msgs = P.conflict_messages([(str(j), "") for j in range(shown)], [""] * max(1, round(rels)))
            yield planned(self.llm, "construction", msgs, self.cfg.conflict_max_tokens, "mem0g.conflicts",
                          exact=False, extra_tokens=int(round((shown + rels) * line)),
                          note=f"{shown} edges shown (min(max_conflict_edges, {rels:g} per pair so far)); {note}")
        yield PlannedEmbed(unknown=int(round(ents + min(ents, 2 * rels) + rels)), kind="mem0g.graph")
        self._est_edges += rels

    def estimate_context(self, question: Question) -> tuple[int, str]:
        """min(k_graph, edges) relation lines under their heading (an edge line: the relation and
        its interval, dated with the history's first date), then the facts under theirs."""
        n = min(int(self.k_graph), int(self._est_edges))
        if not n:
            return 0, ""
        count = self.llm.count_tokens
        line = self._est_sizes()[1] + count(f"- x ({'since ' + self._est_date})") - count("x")
        heads = count("Relations (current):") + (count("Facts:") + 2 if self.use_facts else 0)
        return heads + n * line, f"min(k_graph, {int(self._est_edges)} edges) x {line} relation-line tokens"

    # ---- retrieval -------------------------------------------------------------------------------
    def seed_nodes(self, question: str) -> list[int]:
        """Entity-centred step: nodes whose name is in the question, or whose cosine with a phrase of
        the question is ≥ ``search_threshold`` (mem0 ``search`` → ``_search_graph_db``)."""
        nodes = self.graph.nodes(self.hid)
        if not nodes:
            return []
        words = [w for w in re.findall(r"[A-Za-z0-9']+", question.lower()) if w not in _STOP]
        phrases = list(dict.fromkeys(words + [f"{a} {b}" for a, b in zip(words, words[1:])]))
        seeds = [n.id for n in nodes if re.search(rf"\b{re.escape(n.name)}\b", question.lower())]
        if phrases:
            sims = self.embed(phrases) @ np.stack([n.emb for n in nodes]).T  # phrases × nodes
            best = sims.max(axis=0)
            seeds += [n.id for n, s in zip(nodes, best) if s >= self.search_threshold]
        return list(dict.fromkeys(seeds))

    def graph_edges(self, question: str) -> list[Edge]:
        """Up to ``k_graph`` edges: those around the seed nodes, then the best triplet matches; with
        ``include_invalid``, invalidated edges are candidates too."""
        cands = self.graph.edges(self.hid, valid_only=not self.include_invalid)
        note_retrieval(self.k_graph, len(cands))  # the top_k guard: k_graph >= every edge stored
        if not cands:
            return []
        q = self.embed([question])[0]
        score = {e.id: float(e.emb @ q) if e.emb is not None else 0.0 for e in cands}
        seeds = set(self.seed_nodes(question))
        around = sorted((e for e in cands if e.src in seeds or e.dst in seeds), key=lambda e: -score[e.id])
        matched = sorted(cands, key=lambda e: -score[e.id])[: self.k_graph]
        out = list({e.id: e for e in around + matched}.values())
        return out[: self.k_graph]

    def retrieve(self, question: Question) -> str:
        edges = self.graph_edges(question.question)
        parts = []
        valid = [e for e in edges if e.valid]
        invalid = [e for e in edges if not e.valid]
        for e in valid + invalid:  # retrieved: the edges in the order shown, then the facts
            note_retrieved(("edge", e.id), self.edge_provenance(e))
        if valid:
            parts.append("Relations (current):\n" + "\n".join(f"- {e.line()}" for e in valid))
        if invalid:
            parts.append("Relations (no longer valid):\n" + "\n".join(f"- {e.line()}" for e in invalid))
        if self.use_facts:
            facts = self.fact_context(question)
            if facts:
                parts.append("Facts:\n" + facts)
        return "\n\n".join(parts)

    def graph_stats(self) -> tuple[int, int]:
        """What the graph holds: every node (name and type) and every edge, invalidated ones included
        (text and validity interval, as retrieval renders it): (items, tokens)."""
        nodes: list[Node] = self.graph.nodes(self.hid)
        edges = self.graph.edges(self.hid, valid_only=False)
        toks = sum(self.llm.count_tokens(n.text()) for n in nodes) + sum(self.llm.count_tokens(e.line())
                                                                          for e in edges)
        return len(nodes) + len(edges), toks

    def memory_stats(self) -> tuple[int, int]:
        items, toks = super().memory_stats()
        g_items, g_toks = self.graph_stats()
        return items + g_items, toks + g_toks

    def ingest(self, history) -> None:
        """Ingest ``history``: from scratch with ``rebuild``, else after the last committed step, the
        graph writes of a step a crash cut short undone first (the records rolled back with it)."""
        if self.cfg.rebuild:
            self.graph.clear(history.id)
        else:
            self.graph.roll_back(history.id, self.store.progress(history.id))
        super().ingest(history)

    def roll_back(self, done: int) -> None:
        """The graph commits write by write: undo step ``done``'s writes (a step whose call failed)."""
        self.graph.roll_back(self.hid, done)

    def close(self) -> None:
        self.store.close()
        self.graph.close()

    def prompt_version(self) -> str:
        return P.VERSION
