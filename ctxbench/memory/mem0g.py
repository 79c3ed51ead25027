"""Mem0g (the graph variant of Mem0; mem0ai/mem0 ≤ v1.0.11 graph memory).

Per message pair: entity extraction → relation triplets → node resolution (an entity joins an
existing node when their embeddings' cosine ≥ ``node_threshold``) → conflict detection (the LLM
marks existing edges that the new triplets contradict; ids remapped to small integers, invented
ids rejected and counted) → contradicted edges are marked invalid with the conversation time and
kept; new edges are added. Retrieval combines entity-centred traversal (nodes matching phrases of
the question, their valid edges) and triplet matching (question embedding vs triplet embeddings).
As in the paper, the answer also sees Mem0's facts (``use_facts``).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from ctxbench.registry import register
from ctxbench.types import Question

from .mem0 import Mem0, render_turns
from .prompts import mem0g as P
from .stores.graph import Edge, open_graph

_STOP = set("a an the and or of to in on at for with from by is are was were be been do does did what "
            "when where who whom which how why that this these those it its his her their my your our "
            "now ever has have had will would can could should about as into".split())


def norm_name(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def norm_relation(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.strip().lower()).strip("_")


@register("memory", "mem0g")
class Mem0g(Mem0):
    name = "mem0g"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.graph = open_graph(cfg.get("graph") or {}, self.workdir)
        self.node_threshold = float(cfg.get("node_threshold", 0.7))
        self.use_facts = bool(cfg.get("use_facts", True))
        self.k_graph = int(cfg.get("k_graph", self.k))

    def apply(self, step: tuple, i: int) -> None:
        if step[0] == "summary" or self.use_facts:
            super().apply(step, i)
        if step[0] != "pair":
            return
        _, si, ti = step
        s = self._sessions[si]
        self.add_graph(render_turns(s.turns[ti:ti + 2]), s.date)

    # ---- construction ----------------------------------------------------------------------------
    def add_graph(self, text: str, date: str) -> None:
        ents = self.call(P.entity_messages(date, text), P.entities_schema(int(self.cfg.get("max_entities", 6))),
                         kind="entities", max_new_tokens=int(self.cfg.get("entity_max_tokens", 128)))
        if not ents or not ents["entities"]:
            return
        names = list(dict.fromkeys(n for n in (norm_name(e) for e in ents["entities"]) if n))
        if not names:
            return
        rels = self.call(P.relation_messages(date, text, names),
                         P.relations_schema(names, int(self.cfg.get("max_relations", 4))), kind="relations",
                         max_new_tokens=int(self.cfg.get("relation_max_tokens", 256)))
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
        node_of = {n: self.resolve(n) for n in dict.fromkeys([t[0] for t in triplets] + [t[2] for t in triplets])}
        self.detect_conflicts(triplets, node_of, date)
        existing = {(e.src, e.relation, e.dst) for e in self.graph.edges(self.hid, list(set(node_of.values())))}
        embs = self.embed([f"{a} {r} {b}" for a, r, b in triplets])
        for (a, r, b), e in zip(triplets, embs):
            key = (node_of[a], r, node_of[b])
            if key in existing:
                self.counts["edge_duplicates"] += 1
                continue
            self.graph.add_edge(self.hid, key[0], r, key[2], date, e)
            existing.add(key)
            self.counts["edges_added"] += 1

    def resolve(self, name: str) -> int:
        """The node for ``name``: an existing one with cosine ≥ ``node_threshold``, else a new one."""
        emb = self.embed([name])[0]
        nodes = self.graph.nodes(self.hid)
        if nodes:
            sims = np.stack([n.emb for n in nodes]) @ emb
            j = int(np.argmax(sims))
            if sims[j] >= self.node_threshold:
                self.counts["nodes_resolved"] += 1
                return nodes[j].id
        self.counts["nodes_added"] += 1
        return self.graph.add_node(self.hid, name, emb)

    def detect_conflicts(self, triplets: list[tuple[str, str, str]], node_of: dict[str, int], date: str) -> None:
        old = self.graph.edges(self.hid, list(set(node_of.values())))
        if not old:
            return
        old = old[: int(self.cfg.get("max_conflict_edges", 20))]
        idmap = {str(j): e for j, e in enumerate(old)}
        shown = [(str(j), e.text()) for j, e in enumerate(old)]
        out = self.call(P.conflict_messages(shown, [f"{a} {r} {b}" for a, r, b in triplets]),
                        P.outdated_schema(list(idmap)), kind="conflicts",
                        max_new_tokens=int(self.cfg.get("conflict_max_tokens", 64)))
        if not out:
            return
        for key in dict.fromkeys(out["outdated"]):  # the schema's enum: only ids that were shown
            self.graph.invalidate(idmap[key].id, date)
            self.counts["edges_invalidated"] += 1

    # ---- retrieval -------------------------------------------------------------------------------
    def seed_nodes(self, question: str) -> list[int]:
        """Entity-centred step: nodes whose name matches a phrase of the question."""
        nodes = self.graph.nodes(self.hid)
        if not nodes:
            return []
        words = [w for w in re.findall(r"[A-Za-z0-9']+", question.lower()) if w not in _STOP]
        phrases = list(dict.fromkeys(words + [f"{a} {b}" for a, b in zip(words, words[1:])]))
        seeds = [n.id for n in nodes if re.search(rf"\b{re.escape(n.name)}\b", question.lower())]
        if phrases:
            sims = self.embed(phrases) @ np.stack([n.emb for n in nodes]).T  # phrases × nodes
            best = sims.max(axis=0)
            seeds += [n.id for n, s in zip(nodes, best) if s >= self.node_threshold]
        return list(dict.fromkeys(seeds))

    def graph_edges(self, question: str) -> list[Edge]:
        valid = self.graph.edges(self.hid)
        if not valid:
            return []
        q = self.embed([question])[0]
        score = {e.id: float(e.emb @ q) if e.emb is not None else 0.0 for e in valid}
        seeds = set(self.seed_nodes(question))
        around = sorted((e for e in valid if e.src in seeds or e.dst in seeds), key=lambda e: -score[e.id])
        matched = sorted(valid, key=lambda e: -score[e.id])[: self.k_graph]
        out = list({e.id: e for e in around + matched}.values())
        return out[: self.k_graph]

    def retrieve(self, question: Question) -> str:
        edges = self.graph_edges(question.question)
        parts = []
        if edges:
            parts.append("Relations (current):\n" + "\n".join(f"- {e.text()} (since {e.created})" for e in edges))
        if self.use_facts:
            facts = self.fact_context(question)
            if facts:
                parts.append("Facts:\n" + facts)
        return "\n\n".join(parts)

    def memory_stats(self) -> tuple[int, int]:
        items, toks = super().memory_stats()
        edges = self.graph.edges(self.hid)
        return items + len(edges), toks + sum(self.llm.count_tokens(e.text()) for e in edges)

    def ingest(self, history) -> None:
        if self.cfg.get("rebuild", False):
            self.graph.clear(history.id)
        super().ingest(history)

    def close(self) -> None:
        self.store.close()
        self.graph.close()

    def prompt_version(self) -> str:
        return P.VERSION
