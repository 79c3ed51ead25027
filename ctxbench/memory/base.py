"""What every agent memory system shares: the build contract, resumable ingestion, usage counting.

A system is built as ``cls(cfg, *, llm, embedder, workdir)``. :meth:`MemorySystem.ingest` turns a
history into an ordered list of *steps* (a turn, a message pair, a day's summary ...) and applies
them one by one; after each step the records, the system's state, the construction cost so far and
the step counter are committed together to SQLite in ``workdir``. A rerun after a crash therefore
continues after the last committed step without redoing LLM calls already applied.

A step during which an LLM call failed (``ChatResult.failed``, counted in the backend meter's
``failures``; a structured call whose backend call failed is one) is never committed: its writes
are rolled back (the records store's transaction, and :meth:`MemorySystem.roll_back` for writes
kept elsewhere, Mem0g's graph) and ingestion stops there, since memory systems apply steps in
order and skipping one would not build what a clean run builds. :meth:`construction_stopped`
says so; the evaluator then answers none of the history's questions and reports the run failed,
and a rerun in the same folder redoes exactly the steps from the failed one on.
"""
from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import OUTPUT_SHARE, CannotEstimate, PlannedCall, planned
from ctxbench.data.dates import session_clock
from ctxbench.llm.base import ChatLLM
from ctxbench.llm.fit import held_text_tokens
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Session, Usage

from ctxbench.memory.stores.records import Record, RecordStore
from ctxbench.memory.stores.retrieval_notes import note_retrieved, noting_retrieved, provenance
from ctxbench.memory.stores.structured import StructuredCaller, counter_for, output_counts, own_counts
from ctxbench.memory.stores.vector import VectorIndex

def session_times(sessions: list[Session]) -> list[datetime]:
    """The sessions' conversation times, never decreasing (:func:`ctxbench.data.dates.session_clock`:
    unread dates one day after the previous session, earlier-dated sessions clamped)."""
    return session_clock([s.date for s in sessions]).times


def days_between(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 86400.0


class MemorySystem(System):
    """Base class: subclasses define :meth:`steps`, :meth:`apply`, :meth:`retrieve`."""

    name = "memory"
    needs_embedder: ClassVar[bool] = True
    answer_cap_key = "answer_max_tokens"

    def __init__(self, cfg: Any, *, llm: ChatLLM, embedder: Any = None, workdir: str | Path = ".") -> None:
        self.cfg = cfg
        self.llm = llm
        self.embedder = embedder
        if self.needs_embedder and embedder is None:
            raise ConfigError(f"memory={self.name}: needs an embedder (set embedder=minilm)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store = RecordStore(self.workdir / f"{self.name}.sqlite")
        self.counts: Counter = Counter()
        self.call = StructuredCaller(llm, retries=cfg.json_retries, counts=self.counts)
        self.hid: str | None = None
        self.index: VectorIndex | None = None
        self.ingest_seconds = 0.0
        self.construction: dict[str, int] = {}
        self.stopped: dict[str, int] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop in-memory state; the next :meth:`ingest` loads or builds the history's store."""
        self.hid = None
        self.index = VectorIndex(self.embedder.dim, self.cfg.index) if self.embedder else None
        self.counts.clear()
        self.call.forget()
        self.ingest_seconds = 0.0
        self.construction = {}
        self.stopped = None

    def limit(self, history: History) -> list[Session]:
        """The sessions to ingest: the first ``max_sessions``, then the first ``max_turns`` turns."""
        n = self.cfg.max_sessions
        sessions = history.sessions[: int(n)] if n else list(history.sessions)
        left = self.cfg.max_turns
        if not left:
            return sessions
        out, left = [], int(left)
        for s in sessions:
            if left <= 0:
                break
            out.append(Session(s.id, s.turns[:left], s.date))
            left -= len(out[-1].turns)
        return out

    def ingest(self, history: History) -> None:
        self.reset()
        self.hid = history.id
        if self.cfg.rebuild:
            self.store.clear(history.id)
        self.load()
        steps = self.steps(history)
        self.store.check_resume(self.hid, len(steps), self.cfg, getattr(self.llm, "model_name", None),
                                force=self.force_resume)
        done = self.store.progress(self.hid)
        st = self.store.get_state(self.hid, "_cost", {})
        self.construction = st.get("construction", {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0})
        self.counts.update(st.get("counts", {}))
        self.call.forget(st.get("unusable"))  # a resumed build sends no request an earlier part found unusable
        self.ingest_seconds = float(st.get("seconds", 0.0))
        try:
            from tqdm import tqdm
            it = tqdm(range(done, len(steps)), desc=f"{self.name} ingest {history.id}", initial=done,
                      total=len(steps), disable=len(steps) - done < 2 or not self.cfg.progress)
        except ImportError:  # pragma: no cover
            it = range(done, len(steps))
        for i in it:
            t0 = time.perf_counter()
            before = self.llm.meter.get("construction")
            b = (before.prompt_tokens, before.completion_tokens, before.calls, before.failures)
            self.apply(steps[i], i)
            after = self.llm.meter.get("construction")
            if after.failures > b[3]:
                self.abandon_step(i, len(steps), after.failures - b[3])
                return
            self.construction["prompt_tokens"] += after.prompt_tokens - b[0]
            self.construction["completion_tokens"] += after.completion_tokens - b[1]
            self.construction["calls"] += after.calls - b[2]
            self.ingest_seconds += time.perf_counter() - t0
            self.save_state()
            self.store.set_state(self.hid, "_cost", {"construction": self.construction,
                                                     "counts": dict(self.counts),
                                                     "unusable": self.call.remembered(),
                                                     "seconds": self.ingest_seconds})
            self.store.set_progress(self.hid, i + 1)
            self.store.commit()
        self._memory_stats = self.memory_stats()

    def abandon_step(self, i: int, n_steps: int, failed_calls: int) -> None:
        """Step ``i`` (0-based, of ``n_steps``) made ``failed_calls`` failed LLM calls: undo its writes
        (the records store's open transaction, then :meth:`roll_back`) and stop ingesting."""
        self.store.rollback()
        self.roll_back(i)
        self.stopped = {"step": i + 1, "steps": n_steps, "failed_calls": int(failed_calls)}

    def construction_stopped(self) -> dict[str, int] | None:
        """``{"step", "steps", "failed_calls"}`` when ingesting the current history stopped at ``step``
        (1-based) of ``steps`` because its LLM calls failed (nothing of that step kept), else None."""
        return self.stopped

    # ---- hooks ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Rebuild in-memory indexes from the store (resume); default: live records with embeddings."""
        recs = [r for r in self.store.records(self.hid) if r.emb is not None]
        if recs and self.index is not None:
            self.index.add([r.id for r in recs], np.stack([r.emb for r in recs]))

    def save_state(self) -> None:
        """Persist in-memory state that is not in records (called before each commit)."""

    def roll_back(self, done: int) -> None:
        """Undo what step ``done`` (0-based) wrote outside the records store's transaction (which is
        rolled back with it); default: nothing, every write of a step is in that transaction."""

    def steps(self, history: History) -> list[Any]:
        raise NotImplementedError

    def apply(self, step: Any, i: int) -> None:
        raise NotImplementedError

    def retrieve(self, question: Question) -> str:
        raise NotImplementedError

    def memory_stats(self) -> tuple[int, int]:
        recs = self.store.records(self.hid)
        return len(recs), sum(self.llm.count_tokens(r.text) for r in recs)

    # ---- the estimate (eval estimate=true, ctxbench/evaluation/estimate.py) ----------------------
    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """The calls and embeddings building ``history`` and answering ``questions`` will make
        (:mod:`ctxbench.core.plan`), from the same prompt functions :meth:`apply` uses; ``self.llm`` is the
        estimate's tokenizer-only stand-in. A system that does not say raises :class:`CannotEstimate`."""
        raise CannotEstimate(f"memory={self.name}: no estimate_calls (it cannot say before it runs what it will "
                             "call; its construction depends on model output step by step)")

    def planned_answer(self, question: Question, context_tokens: int, rule: str) -> PlannedCall:
        """The answer call of ``question`` with ``context_tokens`` of retrieved memory (estimated by ``rule``)."""
        return planned(self.llm, "answer", self.answer_messages("", question), self.answer_max_tokens(),
                       f"{self.name}.answer", exact=False, note=rule, extra_tokens=context_tokens)

    @staticmethod
    def output_tokens(cap: int) -> int:
        """The tokens assumed for model output shown in a later prompt: :data:`OUTPUT_SHARE` of its cap."""
        return int(round(OUTPUT_SHARE * int(cap)))

    # ---- helpers -------------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(texts)

    def add_record(self, kind: str, text: str, meta: dict | None = None, time_: str = "",
                   index: bool = True, emb: np.ndarray | None = None) -> int:
        if index and emb is None:
            emb = self.embed([text])[0]
        rid = self.store.add(self.hid, kind, text, meta, time_, emb)
        if index and self.index is not None:
            self.index.add([rid], emb[None, :])
        return rid

    def search(self, text: str, k: int, kinds: set[str] | None = None) -> list[tuple[Record, float]]:
        if self.index is None or k <= 0:
            return []
        q = self.embed([text])[0]
        allowed = None
        if kinds is not None:
            allowed = {r.id for r in self.store.records(self.hid) if r.kind in kinds}
        hits = [(self.store.get(i), s) for i, s in self.index.search(q, k, allowed)]
        self.note_records([r for r, _ in hits])
        return hits

    def note_records(self, records: list[Record]) -> None:
        """``records`` were retrieved for the answer being made (in rank order after what it retrieved
        before): their provenance goes into ``Prediction.meta["retrieved"]``. Outside an answer
        (construction's searches) nothing is noted (:func:`.stores.retrieval_notes.noting_retrieved`)."""
        for r in records:
            note_retrieved(("record", r.id), self.provenance_of(r))

    def provenance_of(self, record: Record) -> dict[str, Any]:
        """Where a record came from: ``{"session", "turns"}`` from its metadata (:func:`provenance`)."""
        return provenance(record.meta)

    # ---- answering -----------------------------------------------------------------------------
    def answer_messages(self, context: str, question: Question) -> list[dict[str, str]]:
        """The system's answer prompt (:attr:`answer_prompt`) with the retrieved memories as context."""
        return self.answer_prompt.messages(question, context)

    def answer(self, question: Question) -> Prediction:
        """Retrieve, then answer with the shared prompt. ``usage.extra["search_seconds"]`` is the time
        :meth:`retrieve` took (Mem0's Table 2 "search" latency: fetching the memories, before the answer).

        Everything this answer notes stays in this call (answers of one history may run side by side on
        the shared instance): its counts (:func:`.stores.structured.own_counts`) come back as
        ``Prediction.outputs``, what :meth:`retrieve_noted` noted in ``usage.extra``, what it retrieved
        (:meth:`note_records`: each item's session and turns, in rank order) in ``meta["retrieved"]``."""
        t0, a0 = self.answer_start()
        with own_counts() as mine, noting_retrieved() as retrieved:
            context, noted = self.retrieve_noted(question)
            search_s = time.perf_counter() - t0
            msgs = self.answer_messages(context, question)
            r = self.llm.chat(msgs, max_new_tokens=self.answer_max_tokens(question), temperature=0.0, phase="answer",
                              **self.answer_prompt.call_kwargs())
        self.store.commit()  # recall side effects (MemoryBank strength) persist
        held = held_text_tokens(self.llm, msgs, context, self.answer_max_tokens(question))
        usage = self.answer_usage(t0, a0, held, {**noted, "search_seconds": round(search_s, 6)})
        return Prediction(text=r.text.strip(), usage=usage, outputs=output_counts(mine),
                          meta={"context": context, "prompt_version": self.prompt_version(), "retrieved": retrieved})

    def retrieve_noted(self, question: Question) -> tuple[str, dict[str, Any]]:
        """(the memories shown for ``question``, what this retrieval noted for ``usage.extra``);
        default: :meth:`retrieve`, nothing noted."""
        return self.retrieve(question), {}

    def answer_start(self) -> tuple[float, tuple[int, int, int]]:
        """Start timing an answer: (start time, the answer meter's tokens and calls so far) for answer_usage."""
        if self.hid is None:
            raise RuntimeError(f"memory={self.name}: answer() before ingest()")
        a = self.llm.meter.get("answer")
        return time.perf_counter(), (a.prompt_tokens, a.completion_tokens, a.calls)

    def answer_usage(self, t0: float, a0: tuple[int, int, int], held_text: int, extra: dict[str, Any]) -> Usage:
        """One answer's Usage: construction so far, the answer phase since ``a0``, what was held.

        ``held_text`` counts the tokens of history/memory text the answering model got, and only that
        (:func:`~ctxbench.llm.fit.held_text_tokens`: what is left once the backend fits the prompt),
        never the answer prompt's instructions, the question or the speakers' introduction around it
        (those are in ``answer_prompt_tokens``, which the evaluator meters). ``memory_items`` / ``memory_tokens`` are the history's whole store
        (:meth:`memory_stats`: every live record, e.g. ReadAgent's pages and their gists)."""
        a = self.llm.meter.get("answer")
        items, mtoks = getattr(self, "_memory_stats", None) or self.memory_stats()
        return Usage(
            construction_prompt_tokens=self.construction.get("prompt_tokens", 0),
            construction_completion_tokens=self.construction.get("completion_tokens", 0),
            construction_calls=self.construction.get("calls", 0),
            answer_prompt_tokens=a.prompt_tokens - a0[0], answer_completion_tokens=a.completion_tokens - a0[1],
            answer_calls=a.calls - a0[2], held_text=held_text,
            memory_items=items, memory_tokens=mtoks, ingest_seconds=self.ingest_seconds,
            answer_seconds=time.perf_counter() - t0, extra=extra)

    def output_counts(self) -> dict[str, Any]:
        """What building the current history counted: structured requests, those that ended without a
        usable value, the per-phase breakdown (:func:`.stores.structured.output_counts`). Each answer
        counts its own apart (``Prediction.outputs``)."""
        return output_counts(self.counts)

    def count(self, key: str, n: int = 1) -> None:
        """Count ``n`` of ``key``: in the answer's own counts while answering, else the history's."""
        counter_for(self.counts)[key] += n

    def prompt_version(self) -> str:
        return "none"

    def close(self) -> None:
        self.store.close()
