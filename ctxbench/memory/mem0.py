"""Mem0 (Chhikara et al., 2025; mem0ai/mem0): two-phase memory pipeline.

Extraction: for each new message pair, the LLM sees (running conversation summary, last ``m``
messages, the new pair) and returns candidate facts. Update: for each candidate, the top ``s``
similar stored memories are shown with their ids remapped to small integers (as the reference
does) and one LLM decision ADD / UPDATE / DELETE / NOOP is applied to the store. Both calls declare
their JSON Schema beside their prompt (:mod:`.prompts.mem0`) and the backend decodes under it: a fact
starts with a speaker's name and has a bounded length, at most ``max_facts`` per pair, and an UPDATE
or DELETE can only name an id that was shown (an enum), so an invented id cannot be generated. The
summary is refreshed once per session (the paper's asynchronous summary, cached in the store).

Stores (``stores``): ``per_speaker`` (the paper setting) keeps one store per speaker, as Mem0's
evaluation does (mem0ai/mem0 evaluation/src/memzero/add.py: each speaker's ``user_id`` gets the
conversation with that speaker's messages as ``user`` and the other side's as ``assistant``, and
its custom instructions ask for memories "only from user messages", each naming the person). Each
speaker's store holds facts about that speaker, and update decisions compare a fact with that store
only. At question time each speaker's store is searched with its own top ``k``
(evaluation/src/memzero/search.py ``answer_question``) and the context lists every speaker with
memories, in the history's speaker order, as ``"timestamp: memory"`` under ``Memories for user
NAME:`` (:func:`ctxbench.qa.prompts.mem0.speaker_memories`, the layout of evaluation/prompts.py
``ANSWER_PROMPT``). ``shared`` is one store for all speakers, searched once with top ``k``
(ctxbench before issue 16).

How per-speaker extraction differs from the reference: mem0ai adds every message pair to both
users, so ``Memory.add`` → ``_add_to_vector_store`` runs its fact-extraction call
(``FACT_RETRIEVAL_PROMPT`` / the custom instructions) once per speaker: two calls per pair. Here
the pair is extracted ONCE, with the facts of both speakers, each starting with the name of the
speaker it is about (the fact schema's name prefix), and each fact is routed to that speaker's
store (:func:`.prompts.mem0.speaker_of`); the update step then runs per store as before. The
stores hold the same kind of content — facts about their speaker, from the same pair, the same
summary and recent messages — for half the extraction calls (issue 44: 203 ingest calls against
102). What differs: a fact is routed by whom it is about, where the reference files it by whose
messages it came from (a remark by one speaker about the other lands in the other's store here),
and the model sees the pair once with both names rather than twice from each side.

A memory's provenance (``meta.session`` / ``meta.turns``, :attr:`Prediction.meta` ``retrieved``) is the
message pair that added it; an UPDATE adds the updating pair's turns (and session, ``meta.sessions``
when they differ). An UPDATE gives the memory the time of the message that updated it (``time``; ``meta.updated``),
keeping when it was first stored in ``meta.created``: mem0's ``Memory._update_memory`` replaces the
memory's metadata by the updating call's (its ``timestamp``) and keeps ``created_at``. The running
summary counts in the memory footprint (:meth:`Mem0.memory_stats`).
"""
from __future__ import annotations

from typing import Any

from ctxbench.config.schemas.memory import Mem0Memory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.qa.prompts.mem0 import speaker_memories
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Turn

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.prompts import mem0 as P
from ctxbench.memory.stores.records import Record
from ctxbench.memory.stores.retrieval_notes import merged_provenance

STORES = ("per_speaker", "shared")  # memory.stores: one store per speaker (Mem0's evaluation) | one for all

def render_turns(turns: list[Turn]) -> str:
    return "\n".join(f"{t.speaker}: {t.text}" for t in turns)


@register("memory", "mem0")
class Mem0(MemorySystem):
    Settings = Mem0Memory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "mem0"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k = cfg.k
        self.m = cfg.m
        self.s = cfg.s
        self.stores = cfg.stores
        if self.stores not in STORES:
            raise ConfigError(f"memory.stores={self.stores!r} is not a store layout; use one of {' | '.join(STORES)}")
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
            if self.cfg.summary:
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
                              max_new_tokens=self.cfg.summary_max_tokens, phase="construction")
            if not r.failed and r.text.strip():
                self.summary = r.text.strip()
            return
        _, si, ti = step
        s = self._sessions[si]
        pair = s.turns[ti:ti + 2]
        recent, new = render_turns(self._recent(si, ti)), render_turns(pair)
        meta = {"session": s.id, "turns": [t.id for t in pair]}
        for f in self.extract(recent, s.date, new):
            if self.stores == "shared":
                self.update(f, s.date, meta)
                continue
            owner = P.speaker_of(f, self._speakers)
            if owner is None:  # only a schema without names (a history with no speakers) lets one through
                self.counts["facts_unrouted"] += 1
                continue
            self.update(f, s.date, {**meta, "speaker": owner}, owner)

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Per message pair one extraction call (exact but for the running summary, assumed
        :meth:`output_tokens` of its cap once the first session is summarised), per session one summary
        call; the update calls depend on how many facts extraction returns: ``estimate_facts_per_pair``
        facts per pair (an assumption, not a measurement: docs/estimate.md), each embedded, each but the
        first per store decided by one update call showing min(s, facts so far) memories of the mean
        fact's tokens (a fact: its pair's mean turn tokens). Per question one answer over min(k, facts)
        facts per store. A subclass adds its own calls per pair (:meth:`estimate_pair`) and context per
        answer (:meth:`estimate_context`); :attr:`estimates_facts` false leaves the fact pipeline out."""
        sessions = self.limit(history)
        self._speakers = list(history.speakers) or list(dict.fromkeys(t.speaker for s in sessions for t in s.turns))
        self._sessions = sessions
        count = self.llm.count_tokens
        summary_toks = self.output_tokens(self.cfg.summary_max_tokens)
        per_pair = float(self.cfg.estimate_facts_per_pair)
        stores = max(1, len(self._speakers)) if self.stores == "per_speaker" else 1
        schema = P.facts_schema(self._speakers, self.cfg.max_facts)
        facts, fact_tokens, summarised, owed = 0.0, [], False, 0.0
        for si, s in enumerate(sessions):
            for ti in range(0, len(s.turns), 2):
                pair = s.turns[ti:ti + 2]
                if self.estimates_facts:
                    msgs = P.extract_messages("", render_turns(self._recent(si, ti)), s.date, render_turns(pair))
                    extra = summary_toks if summarised else 0
                    yield planned(self.llm, "construction", msgs, self.cfg.extract_max_tokens, "mem0.extract",
                                  schema=schema, exact=not summarised, extra_tokens=extra,
                                  note=f"the running summary assumed {summary_toks} tokens" if summarised else "")
                    tok = sum(count(f"{t.speaker}: {t.text}") for t in pair) / max(1, len(pair))
                    owed += per_pair
                while self.estimates_facts and owed >= 1.0:  # this pair's facts (a fractional rate carried on)
                    owed -= 1.0
                    yield PlannedEmbed(unknown=1, kind="mem0.fact")
                    if facts >= stores:  # the first fact of each store is added without a decision
                        n = min(self.s, int(facts // stores) or 1)
                        mean = sum(fact_tokens) / len(fact_tokens)
                        msgs = P.update_messages([(str(j), "") for j in range(n)], "")
                        yield planned(self.llm, "construction", msgs, self.cfg.update_max_tokens, "mem0.update",
                                      exact=False, extra_tokens=int(round(mean * (n + 1))),
                                      note=f"estimate_facts_per_pair={per_pair:g} (assumed); {n} memories x "
                                           f"{mean:.1f} mean fact tokens")
                    facts += 1
                    fact_tokens.append(tok)
                yield from self.estimate_pair(s, pair)
            if self.cfg.summary:
                msgs = P.summary_messages("", s.date, render_turns(s.turns))
                yield planned(self.llm, "construction", msgs, self.cfg.summary_max_tokens, "mem0.summary",
                              exact=not summarised, extra_tokens=summary_toks if summarised else 0,
                              note=f"the running summary assumed {summary_toks} tokens" if summarised else "")
                summarised = True
        mean = sum(fact_tokens) / len(fact_tokens) if fact_tokens else 0.0
        for q in questions:
            yield PlannedEmbed((q.question,), kind="mem0.query")
            n = min(self.k * stores, int(facts))
            more, rule = self.estimate_context(q)
            facts_rule = f"min(k x {stores} stores, {int(facts)} facts) x {mean:.1f} mean fact tokens"
            yield self.planned_answer(q, int(round(mean * n)) + 4 * n + more,
                                      f"{facts_rule}{'; ' + rule if rule else ''}" if self.estimates_facts else rule)

    @property
    def estimates_facts(self) -> bool:
        """The estimate plans the fact pipeline (extraction, updates, facts in the answer)."""
        return True

    def estimate_pair(self, session: Any, pair: list[Turn]) -> Any:
        """Planned items a subclass adds per message pair (Mem0: none)."""
        return iter(())

    def estimate_context(self, question: Question) -> tuple[int, str]:
        """(tokens, rule) of answer context a subclass adds to the facts (Mem0: none)."""
        return 0, ""

    # ---- the two phases ------------------------------------------------------------------------
    def extract(self, recent: str, date: str, new: str) -> list[str]:
        """Candidate facts of the new pair, each starting with the name of the speaker it is about."""
        schema = P.facts_schema(getattr(self, "_speakers", []), self.cfg.max_facts)
        out = self.call(P.extract_messages(self.summary, recent, date, new), schema, kind="extract",
                        max_new_tokens=self.cfg.extract_max_tokens)
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

    def update(self, fact: str, date: str, meta: dict, owner: str | None = None) -> None:
        """One ADD/UPDATE/DELETE/NOOP decision for ``fact`` against its top-``s`` neighbours in
        ``owner``'s store (the shared one when None)."""
        emb = self.embed([fact])[0]
        hits = self.index.search(emb, self.s, self._fact_ids(owner)) if self.index is not None else []
        if not hits:  # empty neighbourhood: nothing to compare with, the reference adds
            self.add_record("fact", fact, meta, date, emb=emb)
            self.counts["ADD"] += 1
            return
        idmap = {str(j): rid for j, (rid, _) in enumerate(hits)}
        shown = [(str(j), self.store.get(rid).text) for j, (rid, _) in enumerate(hits)]
        d = self.call(P.update_messages(shown, fact), P.decision_schema(list(idmap)), kind="update",
                      max_new_tokens=self.cfg.update_max_tokens)
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
                old = self.store.get(rid)
                stamped = {**old.meta, "created": old.meta.get("created", old.time), "updated": date,
                           **merged_provenance(old.meta, meta)}  # provenance: where it was added and updated
                self.store.update(self.hid, rid, text=text, meta=stamped, emb=new_emb, time=date)
                self.index.add([rid], new_emb[None, :])
            else:
                self.store.delete(self.hid, rid)
                self.index.remove([rid])
        self.counts[event] += 1

    def _fact_ids(self, owner: str | None = None) -> set[int]:
        """Live facts of ``owner``'s store (all facts when None: the shared store)."""
        return {r.id for r in self.store.records(self.hid, "fact") if owner is None or r.meta.get("speaker") == owner}

    def memory_stats(self) -> tuple[int, int]:
        """Records and their tokens, plus the running summary's tokens (state the system holds)."""
        items, toks = super().memory_stats()
        return items, toks + (self.llm.count_tokens(self.summary) if self.summary else 0)

    # ---- answering -----------------------------------------------------------------------------
    def speaker_facts(self, question: Question) -> list[tuple[str, list[Record]]]:
        """Per speaker with a store (the history's speaker order first), that store's top-``k`` facts."""
        by: dict[str, set[int]] = {}
        for r in self.store.records(self.hid, "fact"):
            if r.meta.get("speaker"):
                by.setdefault(r.meta["speaker"], set()).add(r.id)
        known = getattr(self, "_speakers", [])
        order = [n for n in known if n in by] + [n for n in by if n not in known]
        if not order or self.index is None or self.k <= 0:
            return []
        q = self.embed([question.question])[0]
        out = [(n, [self.store.get(i) for i, _ in self.index.search(q, self.k, by[n])]) for n in order]
        for _, recs in out:  # retrieved in the order the context shows them
            self.note_records(recs)
        return out

    def fact_context(self, question: Question) -> str:
        """The facts shown to the answer: per speaker (:func:`speaker_memories`) or one list (shared)."""
        if self.stores == "per_speaker":
            return speaker_memories([(n, [f"{r.time}: {r.text}" if r.time else r.text for r in recs])
                                     for n, recs in self.speaker_facts(question)])
        hits = self.search(question.question, self.k, {"fact"})
        return "\n".join(f"[{r.time}] {r.text}" if r.time else r.text for r, _ in hits)

    def retrieve(self, question: Question) -> str:
        return self.fact_context(question)

    def prompt_version(self) -> str:
        return P.VERSION
