"""The run loop: every question answered once, resumably, in these phases::

    plan        the first ``limit`` questions, in dataset order (duplicate ids refused)
    resume      drop what the run folder already answered (:mod:`ctxbench.evaluation.resume`)
    build       the first history's system, before any question (a bad config fails now)
    answer      per history: ingest, then answer each question → one line appended to
                predictions.jsonl (flushed, fsynced), on 1 or N workers (:mod:`ctxbench.evaluation.pool`);
                a history whose construction stopped at a failed LLM call
                (:meth:`~ctxbench.core.system.System.construction_stopped`) answers nothing: each of
                its questions is written ``failed`` with ``construction_stopped`` (health fails the
                run; a rerun resumes the construction at that step and answers them)
    return      this dataset's records, in dataset order

Under N workers the seconds recorded (``answer_seconds``, ``construction.seconds``) leave out a
task's waits for the workers' lock (recorded apart as ``lock_wait_seconds``); waits for the backend's
own slots or a batch stay in, as a user of that backend would see them.

A system whose class borrows the backend (``borrows_backend``) is lent it for the run
(:mod:`ctxbench.evaluation.lend`: the server starts with the first such instance built and stops with the
run): each task binds the instance's calls over HTTP to itself (:meth:`Recorder.task`), so they are
counted as its calls through ``self.llm`` would be; such an instance answers one question at a time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ctxbench.core.secrets import scrub_text
from ctxbench.core.system import System
from ctxbench.core.types import Question, Sample, Usage
from ctxbench.data.errors import DataError
from ctxbench.evaluation.lend import Lender, borrows
from ctxbench.evaluation.cost import account_answer, account_construction, failed_answer, history_tokens, scope_phase
from ctxbench.evaluation.pool import Gate, HistoryWork, run_tasks
from ctxbench.evaluation.resume import answered, needs_answer, predictions_path
from ctxbench.evaluation.sample_log import SampleLog
from ctxbench.evaluation.systems import HistorySystems
from ctxbench.llm.scope import call_scope
from ctxbench.memory.stores.retrieval_notes import noting_retrieval, retrieval_summary
from ctxbench.metrics.base import answer_text
from ctxbench.data.categories import is_abstention
from ctxbench.metrics.evidence_age import AGE, LAST_SESSION, history_last_session, session_evidence_age
from ctxbench.metrics.evidence_recall import locomo_sessions
from ctxbench.qa.forms import without_gold
from ctxbench.runs.results import JsonlAppender


def plan(samples: list[Sample], limit: int | None) -> list[tuple[Sample, list[Question]]]:
    """The histories and questions to answer: the first ``limit`` questions in dataset order."""
    work: list[tuple[Sample, list[Question]]] = []
    seen: set[str] = set()
    budget = None if limit in (None, 0) else int(limit)
    for s in samples:
        qs = []
        for q in s.questions:
            if budget is not None and budget <= 0:
                break
            if q.id in seen:
                raise DataError(s.history.id, "duplicate question id (ids must be unique across the dataset)",
                                record=q.id, field="id")
            seen.add(q.id)
            qs.append(q)
            if budget is not None:
                budget -= 1
        if qs:
            work.append((s, qs))
    return work


def question_record(q: Question, history_id: str, last_session: int | None = None,
                    session_order: list[str] | None = None) -> dict[str, Any]:
    """The question's fields of its predictions.jsonl line; a question with evidence also carries its
    history's last session (``history_last_session``: the age of its evidence, :mod:`ctxbench.metrics.evidence_age`)
    and its evidence sessions (``evidence_sessions``: ``Question.meta["evidence_sessions"]``, else LoCoMo's
    ``session_<s>`` of its dia ids); an abstention question carries ``abstention: true``. A history without
    LoCoMo's session numbering (LongMemEval) gives its questions' age directly (``evidence_age``: sessions
    after the latest evidence session in ``session_order``, the history's sessions in time order)."""
    asked_in_context = (q.meta or {}).get("question_in_context")  # task.query_aware: asked empty (protocol.py)
    rec: dict[str, Any] = {"id": q.id, "history_id": history_id,
                           "question": q.question if asked_in_context is None else asked_in_context,
                           "answer": answer_text(q.answer), "category": q.category,
                           "category_name": q.category_name}
    if asked_in_context is not None:
        rec["question_in_context"] = True  # the question was compressed with the context and asked empty
    if q.adversarial_answer is not None:
        rec["adversarial_answer"] = q.adversarial_answer
    if q.evidence:
        rec["evidence"] = list(q.evidence)
        if last_session is not None:
            rec[LAST_SESSION] = last_session
    sessions = list((q.meta or {}).get("evidence_sessions") or []) or locomo_sessions(q.evidence or [])
    if sessions:  # evidence recall's session-level gold (ctxbench/metrics/evidence_recall.py)
        rec["evidence_sessions"] = [str(s) for s in sessions]
        if last_session is None and session_order:
            age = session_evidence_age(session_order, rec["evidence_sessions"])
            if age is not None:
                rec[AGE] = age
    gold = (q.meta or {}).get("retrieval_gold")
    if isinstance(gold, dict):  # LongMemEval's retrieval gold (user-side evidence): ctxbench/metrics/evidence_recall.py
        rec["retrieval_gold"] = gold
    if is_abstention(q):  # LongMemEval: judged with the abstention template, left out of evidence recall
        rec["abstention"] = True
    return rec


def run_system(system: System | Any, samples: list[Sample], out_dir: str | Path, *, llm: Any = None,
               limit: int | None = None, progress: bool = True, shard: int | None = None,
               concurrency: int = 1, log_samples: bool = False, protocol_pure: bool = False) -> list[dict[str, Any]]:
    """Answer every question (the first ``limit``), resuming from what ``out_dir`` already holds.

    ``system`` is one :class:`System` that ingests every history in turn, or a :class:`HistorySystems`
    (one instance per history, each in its own folder: what ``eval`` uses). With ``concurrency`` N > 1
    the histories and questions run on N workers (:mod:`ctxbench.evaluation.pool`); one shared instance
    opens one history at a time. Answers are appended to predictions.jsonl as they complete; the
    records returned are this dataset's questions in dataset order, whatever order they completed in.
    A question whose answer failed (its LLM calls failed) is written with ``failed: true`` and
    answered again on the next run; it is never scored. With ``shard=rank`` the answers go to
    ``predictions.rank<rank>.jsonl`` (``samples`` being this rank's part:
    :func:`ctxbench.evaluation.shard.run_sharded`). ``log_samples``: every answer's and construction's
    calls to ``samples.jsonl`` / ``construction_calls.jsonl`` (:mod:`ctxbench.evaluation.sample_log`).
    ``protocol_pure``: each system answers the question without its gold fields
    (:func:`ctxbench.qa.forms.without_gold`); the record keeps them for scoring.
    """
    systems = system if isinstance(system, HistorySystems) else HistorySystems.one(system)
    out_dir = Path(out_dir)
    done = answered(out_dir)
    work = plan(samples, limit)
    order = [q.id for _, qs in work for q in qs]
    pending = [(s, [q for q in qs if needs_answer(done, q.id)]) for s, qs in work]
    pending = [(s, qs) for s, qs in pending if qs]
    with Lender(llm, systems.embedder) as lender:  # served only once a system that borrows it is built
        systems.lender = lender
        try:
            _answer(systems, work, pending, done, out_dir, lender, llm=llm, progress=progress, shard=shard,
                    concurrency=concurrency, log_samples=log_samples, protocol_pure=protocol_pure)
        finally:
            systems.lender = None
            systems.lent_record = lender.record()
    return [done[qid] for qid in order]


def _answer(systems: HistorySystems, work: list[tuple[Sample, list[Question]]],
            pending: list[tuple[Sample, list[Question]]], done: dict[str, dict[str, Any]], out_dir: Path,
            lender: Lender, *, llm: Any, progress: bool, shard: int | None, concurrency: int, log_samples: bool,
            protocol_pure: bool) -> None:
    from ctxbench.llm.shared import SharedLLM

    order_n = sum(len(qs) for _, qs in work)
    if work:  # the first history to answer (else the first: it describes the run) has its system now
        systems.build_first((pending or work)[0][0].history.id)
    workers = max(1, int(concurrency))
    gate = lender.gate = Gate() if workers > 1 else None
    shared = llm if isinstance(llm, SharedLLM) else None
    if shared is not None:
        shared.serve(gate, batch=gate is not None and shared.batch_size() > 1)
    bar = tqdm(total=order_n, initial=order_n - sum(len(qs) for _, qs in pending), desc="eval", unit="q",
               disable=not progress, dynamic_ncols=True)
    try:
        with JsonlAppender(predictions_path(out_dir, shard)) as out, \
                SampleLog(out_dir if log_samples else None, shard) as log:
            recorder = Recorder(llm=llm, out=out, done=done, bar=bar, log=log, gate=gate, protocol_pure=protocol_pure,
                                lender=lender)
            histories = [HistoryTasks(s, qs, systems, recorder).work() for s, qs in pending]
            run_tasks(histories, workers, gate, open_limit=workers if systems.per_history else 1)
    finally:
        if shared is not None:
            shared.serve(None, batch=False)
        lender.gate = None
        systems.close_unused()
    bar.close()


@dataclass
class Recorder:
    """Where every answer of a run goes: predictions.jsonl, the sample log, the resume map, the bar."""

    llm: Any
    out: JsonlAppender
    done: dict[str, dict[str, Any]]
    bar: Any
    log: SampleLog
    gate: Gate | None
    protocol_pure: bool = False  # systems see questions without_gold
    lender: Lender | None = None  # the run's lent backend: a borrowing system's calls bound to its task

    def task(self, system: System | None, phase: str) -> Any:
        """The block in which ``system``'s calls to the lent backend are this task's, under ``phase``."""
        import contextlib

        return self.lender.task(system, phase) if self.lender is not None else contextlib.nullcontext()

    def waited(self) -> float:
        """Seconds this thread has waited for the workers' lock (0 off the workers)."""
        return self.gate.waited_s() if self.gate is not None else 0.0

    def record(self, q: Question, rec: dict[str, Any], pred: Any, calls: list[dict[str, Any]]) -> None:
        self.out.append(rec)
        self.log.answer(rec, pred, calls)
        self.done[q.id] = rec
        self.bar.update(1)

    def unanswered(self, q: Question, rec: dict[str, Any]) -> None:
        """A question left unanswered (``failed``), with no answer to log."""
        self.out.append(rec)
        self.done[q.id] = rec
        self.bar.update(1)


def stopped_why(stopped: dict[str, Any]) -> str:
    """One line for a construction that stopped: at which step, after what (a failed LLM call, or the system's
    own ``error``: memory=http's remote, naming its url and endpoint)."""
    where = f"construction stopped at step {stopped['step']}/{stopped['steps']}"
    return f"{where}: {stopped['error']}" if stopped.get("error") else f"{where} after a failed call"


class HistoryTasks:
    """One history's tasks for :func:`ctxbench.evaluation.pool.run_tasks`: ingest, answer each
    pending question, then release the history's system.

    The run's answer prompt post-processes every answer here, once (not in the system).
    """

    def __init__(self, sample: Sample, pending: list[Question], systems: HistorySystems, recorder: Recorder):
        self.sample, self.pending, self.systems, self.recorder = sample, pending, systems, recorder
        self.hid = sample.history.id
        self.last_session = history_last_session(sample.history)  # its questions' evidence ages are counted from it
        self.session_order = [s.id for s in sample.history.sessions]  # ... or from here (no LoCoMo numbering)
        self.prompt = systems.first.answer_prompt
        self.system: System | None = None
        self.ingest_s = 0.0
        self.construction_meter: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
        self.construction: dict[str, Any] | None = None  # the history's cost, from its first completed answer
        self.history_tokens: int | None = None  # the whole history's tokens (the held-context guard's denominator)
        self.stopped: dict[str, int] | None = None  # its construction stopped at a failed call

    def work(self) -> HistoryWork:
        first = self.systems.first  # a borrower's calls are told apart by instance: its answers one at a time
        return HistoryWork(ingest=self.ingest, answers=[partial(self.answer, q) for q in self.pending],
                           in_order=bool(first.answer_writes_state or borrows(first)), finish=self.finish)

    def ingest(self) -> None:
        system = self.system = self.systems.get(self.hid)
        with self.recorder.task(system, "construction"):
            system.reset()
        self.recorder.bar.set_postfix_str(f"ingest {self.hid}")
        t0, w0 = time.perf_counter(), self.recorder.waited()
        with call_scope(sink=self.recorder.log.construction_sink(self.hid)) as scope, \
                self.recorder.task(system, "construction"):
            system.ingest(self.sample.history)
        self.ingest_s = time.perf_counter() - t0 - (self.recorder.waited() - w0)
        self.construction_meter = scope_phase(scope, self.recorder.llm, "construction")
        self.history_tokens = history_tokens(self.sample.history, self.recorder.llm, system)
        self.recorder.bar.set_postfix_str(self.hid)
        self.stopped = system.construction_stopped()
        if self.stopped is not None:
            self.leave_unanswered(system, self.stopped)

    def leave_unanswered(self, system: System, stopped: dict[str, int]) -> None:
        """Construction stopped at a failed call: every pending question written ``failed`` (not an
        answer: never scored, answered on the rerun that finishes the construction)."""
        why = stopped_why(stopped)
        tqdm.write(f"eval: history {self.hid}: {why}; its {len(self.pending)} question(s) are not answered in this "
                   "run (rerun in the same run folder to resume the construction at that step)")
        construction = self.construction_of(system, Usage())
        for q in self.pending:
            rec = question_record(q, self.hid, self.last_session, self.session_order)
            rec.update(prediction="", usage=Usage().to_dict(), construction=construction, failed=True, error=why,
                       construction_stopped=dict(stopped))
            self.recorder.unanswered(q, rec)

    def answer(self, q: Question) -> None:
        if self.stopped is not None:  # written unanswered at ingest
            return
        system, llm = self.system, self.recorder.llm
        t1, w1 = time.perf_counter(), self.recorder.waited()
        asked = without_gold(q) if self.recorder.protocol_pure else q  # what the system is told
        with call_scope(keep_calls=self.recorder.log.enabled) as scope, noting_retrieval() as searches, \
                self.recorder.task(system, "answer"):
            pred = system.answer(asked)
        lock_wait = self.recorder.waited() - w1
        answer_s = time.perf_counter() - t1 - lock_wait
        usage = account_answer(pred, llm, scope_phase(scope, llm, "answer"))
        retrieval = retrieval_summary(searches)  # the top_k guard (ctxbench/metrics/guards.py)
        if retrieval is not None:
            usage.extra["retrieval"] = retrieval
        if self.construction is None:
            self.construction = self.construction_of(system, usage)
        rec = question_record(q, self.hid, self.last_session, self.session_order)
        rec.update(prediction=self.prompt.postprocess(asked, pred.text), raw_prediction=pred.text,
                   usage=usage.to_dict(), answer_seconds=round(answer_s, 4), construction=self.construction,
                   outputs=dict(pred.outputs or {}))
        meta = {k: scrub_text(v) if isinstance(v, str) else v for k, v in (pred.meta or {}).items()
                if k != "context"}
        if meta:
            rec["meta"] = meta
        if lock_wait > 0:
            rec["lock_wait_seconds"] = round(lock_wait, 4)
        if failed_answer(pred, usage):
            rec["failed"] = True
            rec["error"] = scrub_text(str(meta.get("error") or "the answer's LLM calls failed"))
        self.recorder.record(q, rec, pred, scope.calls)

    def construction_of(self, system: System, usage: Usage) -> dict[str, Any]:
        """The history's construction record, with the whole history's tokens when they were counted."""
        c = account_construction(system, usage, self.construction_meter, self.ingest_s)
        if self.history_tokens is not None:
            c["history_tokens"] = self.history_tokens
        return c

    def finish(self) -> None:
        self.systems.release(self.system)
        self.system = None
