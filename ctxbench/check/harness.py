"""One run of a checked system through the one evaluator, as ``eval`` runs it, on the check's doubles.

:func:`run` answers the samples into a run folder with :func:`ctxbench.evaluation.run.run_system`
(a memory system: one instance per history on the shared backend; a method: one instance for all),
optionally on several workers, under ``protocol_pure``, or stopped midway (an :class:`Interrupted`
raised at a given LLM call or answer, or ``kill -9``). :func:`finish` writes the result files as
``eval`` does. :func:`untimed` drops the seconds from records so two runs can be compared.
"""
from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxbench.check.doubles import CheckLLM, Interrupted, WordHashEmbedder
from ctxbench.check.target import Target
from ctxbench.core.errors import CtxbenchError
from ctxbench.core.types import Prediction, Usage

# what differs between two runs of the same system on the same data: wall-clock seconds and the process's memory
TIMING = (("answer_seconds",), ("lock_wait_seconds",), ("usage", "answer_seconds"), ("usage", "ingest_seconds"),
          ("usage", "extra", "search_seconds"), ("usage", "extra", "ingest_peak_rss_bytes"),
          ("usage", "extra", "peak_rss_bytes"), ("construction", "seconds"))


class ContractBroken(CtxbenchError):
    """The system broke the System contract during a run (one line: what it did)."""


@dataclass
class Run:
    records: list[dict[str, Any]]
    out: Path
    llm: Any = None  # the shared backend (memory systems), None for a method
    inner: CheckLLM | None = None
    predictions: list[tuple[str, Any]] = field(default_factory=list)  # (question id, what answer() returned)
    first: Any = None  # the first instance built (closed): what describes the run (answer prompt, cap)


class _Answers:
    """Counts answers across a run's instances; stops the run at answer ``stop`` + 1 (raise or kill -9)."""

    def __init__(self, stop: int | None, kill: bool) -> None:
        self.stop, self.kill, self.n = stop, kill, 0
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            if self.stop is not None and self.n >= self.stop:
                if self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise Interrupted(f"stopped after {self.n} answers")
            self.n += 1


def _watched(system: Any, answers: _Answers, inner: CheckLLM | None, seen: list[tuple[str, Any]]) -> Any:
    """``system`` with its ``answer`` counted, its question named to the LLM, and its return checked."""
    real = system.answer

    def answer(question: Any) -> Any:
        answers.tick()
        if inner is not None:
            inner.asking.qid = question.id
        try:
            pred = real(question)
        finally:
            if inner is not None:
                inner.asking.qid = ""  # the calls of a later ingest on this thread belong to no question
        seen.append((question.id, pred))
        problem = prediction_problem(pred)
        if problem:
            raise ContractBroken(problem)
        return pred

    system.answer = answer
    return system


def prediction_problem(pred: Any) -> str | None:
    """Why ``pred`` (what ``answer()`` returned) is not a Prediction with a str text and a Usage; None when it is."""
    if not isinstance(pred, Prediction):
        return (f"answer() returned {type(pred).__name__} {_short(pred)}, not a ctxbench.api.Prediction "
                "(return Prediction(text=..., usage=Usage(...)))")
    if not isinstance(pred.text, str):
        return f"answer() returned Prediction(text={_short(pred.text)}): text must be a str"
    if not isinstance(pred.usage, Usage):
        return f"answer() returned Prediction(usage={_short(pred.usage)}): usage must be a ctxbench.api.Usage"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run(target: Target, samples: list[Any], out: Path, *, concurrency: int = 1, protocol_pure: bool = False,
        limit: int | None = None, delay: float = 0.0, stop_at: tuple[str, int] | None = None,
        stop_after_answers: int | None = None, kill: bool = False, log_samples: bool = False) -> Run:
    """``target`` over ``samples`` into ``out`` (resuming what ``out`` holds), as ``eval`` runs it."""
    from ctxbench.evaluation.run import run_system
    from ctxbench.evaluation.systems import HistorySystems, history_dir
    from ctxbench.llm.shared import SharedLLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    answers = _Answers(stop_after_answers, kill)
    seen: list[tuple[str, Any]] = []
    built: list[Any] = []
    if target.kind == "memory":
        inner = CheckLLM(target.scripted, delay=delay, stop_at=stop_at, kill=kill)
        llm: Any = SharedLLM(inner)
        embedder = WordHashEmbedder() if target.needs_embedder else None

        def make(hid: str) -> Any:
            system = target.build(llm=llm, embedder=embedder, workdir=history_dir(out, hid))
            built.append(system)
            return _watched(system, answers, inner, seen)

        systems = HistorySystems(make, embedder=embedder)  # the lent backend serves it to a system that borrows
    else:
        inner, llm = None, None
        system = target.build()
        built.append(system)
        systems = HistorySystems.one(_watched(system, answers, None, seen))
    try:
        records = run_system(systems, list(samples), out, llm=llm, limit=limit, progress=False,
                             concurrency=concurrency, protocol_pure=protocol_pure, log_samples=log_samples)
    finally:
        for system in built:
            system.__dict__.pop("answer", None)
            _close(system)
    return Run(records, out, llm, inner, seen, built[0] if built else None)


def _close(system: Any) -> None:
    try:
        system.close()
    except Exception:  # noqa: BLE001 - closing twice, or after an interruption: nothing left to release
        pass


def finish(run_: Run, target: Target, cfg: Any = None) -> dict[str, Any]:
    """results.json, results.md and the scored predictions.jsonl of a run, as ``eval`` writes them."""
    from ctxbench.evaluation.finalize import finalize
    from ctxbench.evaluation.resume import beyond_plan
    from ctxbench.evaluation.score import default_metrics
    from ctxbench.evaluation.systems import qa_prompt_record
    from ctxbench.metrics.base import build_metrics

    prompt_record = qa_prompt_record(run_.first) if run_.first is not None else {}
    extra = {"system": target.label, "qa_prompt": prompt_record, "check": True}
    return finalize(run_.out, run_.records, build_metrics(default_metrics()), cfg if cfg is not None else {}, "eval",
                    with_cost=True, extra=extra, progress=False,
                    kept=beyond_plan(run_.out, [str(r["id"]) for r in run_.records]))


def untimed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without their wall-clock seconds (:data:`TIMING`): what two runs must agree on."""
    out = []
    for rec in records:
        rec = json.loads(json.dumps(rec))
        for path in TIMING:
            node = rec
            for key in path[:-1]:
                node = node.get(key) or {}
            node.pop(path[-1], None)
        out.append(rec)
    return out


def first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str | None:
    """Where two runs' records first differ (question id and the dotted key), or None when equal."""
    if [r["id"] for r in a] != [r["id"] for r in b]:
        return f"question ids differ: {[r['id'] for r in a][:5]} vs {[r['id'] for r in b][:5]}"
    for ra, rb in zip(a, b):
        if ra != rb:
            return f"question {ra['id']}: {_diff_key(ra, rb)}"
    return None


def _diff_key(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _diff_key(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.') or 'value'} {_short(a)} vs {_short(b)}"
