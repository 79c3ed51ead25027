"""Mem0 (Chhikara et al., 2025; mem0ai/mem0): two-phase memory pipeline.

Extraction: for each new message pair, the LLM sees (running conversation summary, last ``m``
messages, the new pair) and returns candidate facts. Update: for each candidate, the top ``s``
similar stored memories are shown with their ids remapped to small integers (as the reference
does) and one LLM decision ADD / UPDATE / DELETE / NOOP is applied to the store. Both calls declare
their JSON Schema beside their prompt (:mod:`.prompts.mem0`) and the backend decodes under it: a fact
starts with a speaker's name and has a bounded length, at most ``max_facts`` per pair, and an UPDATE
or DELETE can only name an id that was shown (an enum), so an invented id cannot be generated. The
summary is refreshed once per session (the paper's asynchronous summary, cached in the store).
"""
from __future__ import annotations

from typing import Any

from ctxbench.registry import register
from ctxbench.types import History, Question, Turn

from .base import MemorySystem
from .prompts import mem0 as P

def render_turns(turns: list[Turn]) -> str:
    return "\n".join(f"{t.speaker}: {t.text}" for t in turns)


@register("memory", "mem0")
class Mem0(MemorySystem):
    name = "mem0"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.m = int(cfg.get("m", 10))
        self.s = int(cfg.get("s", 10))
        self.summary = ""

    # ---- steps -------------------------------------------------------------------------------
    def steps(self, history: History) -> list[tuple]:
        """("pair", session, first turn) for each message pair, ("summary", session) per session."""
        self._sessions = self.limit(history)
        self._speakers = list(history.speakers) or list(dict.fromkeys(t.speaker for s in self._sessions
                                                                      for t in s.turns))
        out: list[tuple] = []
        for si, s in enumerate(self._sessions):
            out += [("pair", si, ti) for ti in range(0, len(s.turns), 2)]
            if self.cfg.get("summary", True):
                out.append(("summary", si))
        return out

    def load(self) -> None:
        super().load()
        self.summary = self.store.get_state(self.hid, "summary", "")

    def save_state(self) -> None:
        self.store.set_state(self.hid, "summary", self.summary)

    def _recent(self, si: int, ti: int) -> list[Turn]:
        before = [t for s in self._sessions[:si] for t in s.turns] + self._sessions[si].turns[:ti]
        return before[-self.m:] if self.m > 0 else []

    def apply(self, step: tuple, i: int) -> None:
        if step[0] == "summary":
            s = self._sessions[step[1]]
            r = self.llm.chat(P.summary_messages(self.summary, s.date, render_turns(s.turns)),
                              max_new_tokens=int(self.cfg.get("summary_max_tokens", 128)), phase="construction")
            if not r.failed and r.text.strip():
                self.summary = r.text.strip()
            return
        _, si, ti = step
        s = self._sessions[si]
        pair = s.turns[ti:ti + 2]
        facts = self.extract(render_turns(self._recent(si, ti)), s.date, render_turns(pair))
        for f in facts:
            self.update(f, s.date, {"session": s.id, "turns": [t.id for t in pair]})

    # ---- the two phases ------------------------------------------------------------------------
    def extract(self, recent: str, date: str, new: str) -> list[str]:
        schema = P.facts_schema(getattr(self, "_speakers", []), int(self.cfg.get("max_facts", 4)))
        out = self.call(P.extract_messages(self.summary, recent, date, new), schema, kind="extract",
                        max_new_tokens=int(self.cfg.get("extract_max_tokens", 256)))
        if out is None:
            return []
        facts = []
        for f in dict.fromkeys(x.strip() for x in out["facts"]):
            if P.copies_example(f):
                self.counts["copied_example"] += 1
            elif f:
                facts.append(f)
        self.counts["facts_extracted"] += len(facts)
        return facts

    def update(self, fact: str, date: str, meta: dict) -> None:
        """One ADD/UPDATE/DELETE/NOOP decision for ``fact`` against its top-``s`` neighbours."""
        emb = self.embed([fact])[0]
        hits = self.index.search(emb, self.s, self._fact_ids()) if self.index is not None else []
        if not hits:  # empty neighbourhood: nothing to compare with, the reference adds
            self.add_record("fact", fact, meta, date, emb=emb)
            self.counts["ADD"] += 1
            return
        idmap = {str(j): rid for j, (rid, _) in enumerate(hits)}
        shown = [(str(j), self.store.get(rid).text) for j, (rid, _) in enumerate(hits)]
        d = self.call(P.update_messages(shown, fact), P.decision_schema(list(idmap)), kind="update",
                      max_new_tokens=int(self.cfg.get("update_max_tokens", 96)))
        if d is None:
            return
        self.apply_decision(d, fact, date, meta, idmap, emb)

    def apply_decision(self, d: dict, fact: str, date: str, meta: dict, idmap: dict[str, int], emb) -> None:
        event, text = d["event"], d.get("text") or fact
        if event == "ADD":
            self.add_record("fact", text, meta, date, emb=emb if text == fact else None)
        elif event in ("UPDATE", "DELETE"):
            rid = idmap[d["id"]]  # the schema's enum: only ids that were shown
            if event == "UPDATE":
                new_emb = self.embed([text])[0]
                self.store.update(self.hid, rid, text=text, meta={**self.store.get(rid).meta, "updated": date},
                                  emb=new_emb)
                self.index.add([rid], new_emb[None, :])
            else:
                self.store.delete(self.hid, rid)
                self.index.remove([rid])
        self.counts[event] += 1

    def _fact_ids(self) -> set[int]:
        return {r.id for r in self.store.records(self.hid, "fact")}

    # ---- answering -----------------------------------------------------------------------------
    def fact_context(self, question: Question) -> str:
        hits = self.search(question.question, self.k, {"fact"})
        return "\n".join(f"[{r.time}] {r.text}" if r.time else r.text for r, _ in hits)

    def retrieve(self, question: Question) -> str:
        return self.fact_context(question)

    def prompt_version(self) -> str:
        return P.VERSION
