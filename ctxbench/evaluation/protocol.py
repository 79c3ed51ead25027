"""``eval task=compression``: the kvpress protocol on the QA task's one evaluator path.

The task is the QA task (same run loop, predictions.jsonl, metrics) plus two things:

- every system ``eval`` builds gets ``set_compression_ratio(task.ratio)`` before its first ingest
  (:func:`prepare`, called where :class:`~ctxbench.evaluation.systems.SystemMaker` builds a system):
  each history is then compressed to at most ceil((1 − ratio) × n) of its n ingested tokens
  (:func:`ctxbench.core.task_protocol.ratio_budget`). A system without it is refused in one line
  that names the systems that have it;
- ``task.query_aware=true``: kvpress's ``compress_questions`` (NVIDIA/kvpress
  ``evaluation/evaluate.py``: ``context = context + question``, ``question = ""``): the question text is
  appended to the history text the system ingests (:func:`query_aware_samples`), so it is in the window
  when the method compresses, and the question the system is then asked is empty, so the model reads
  the question only from what the compression kept (the answer prefix still opens its reply).
  ``task.ask_again=true`` also asks the question again, uncompressed, after it (ctxbench's query-aware
  mode before issue 54; not kvpress's). With ``query_aware=false`` (kvpress's leaderboard) the question
  reaches the system only when it is asked, after the compression.

results.json records the protocol (:func:`protocol_record`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.core.task_protocol import BUDGET_ROUNDINGS, check_ratio, set_budget_rounding
from ctxbench.core.types import History, Sample
from ctxbench.data.errors import DataError

TASK = "compression"
BUDGET_RULE = "(1 - ratio) x context tokens, per example"
KVPRESS_BUDGET_RULE = "int(context tokens x (1 - ratio)), per example (kvpress's rounding)"


@dataclass(frozen=True)
class Protocol:
    ratio: float
    query_aware: bool = False
    prefill: str = "whole"  # the fixed-cache presses: one prefill then one compression, or streamed segments
    ask_again: bool = False  # query-aware: the question asked again after the compression (not kvpress's)
    budget: str = "ceil"  # ratio_budget's rounding: ceil (ctxbench) | kvpress (int of the float product)


def protocol_of(cfg: Any) -> Protocol | None:
    """The protocol ``cfg``'s task asks for (None unless ``task=compression``), its ratio checked."""
    task = cfg.get("task") if hasattr(cfg, "get") else None  # a hand-built or non-eval config may hold no task
    if task is None or str(task.name) != TASK:
        return None
    prefill = str(task.prefill)
    if prefill not in ("whole", "segments"):
        raise ConfigError(f"task.prefill={prefill!r}: use whole or segments")
    budget = str(task.budget)
    if budget not in BUDGET_ROUNDINGS:
        raise ConfigError(f"task.budget={budget!r}: use one of {', '.join(BUDGET_ROUNDINGS)}")
    return Protocol(check_ratio(task.ratio), bool(task.query_aware), prefill, bool(task.ask_again), budget)


def ratio_systems() -> list[str]:
    """``method=`` / ``memory=`` names whose systems implement ``set_compression_ratio``."""
    from ctxbench.core import registry

    return [f"{kind}={name}" for kind in ("method", "memory") for name in registry.names(kind)
            if callable(getattr(registry.get(kind, name), "set_compression_ratio", None))]


def check_chosen(cfg: Any) -> None:
    """The chosen ``method=`` / ``memory=`` class refused before anything loads when it has no
    ``set_compression_ratio`` (:func:`prepare` checks the built instance again)."""
    from ctxbench.core import registry

    for kind in ("method", "memory"):
        node = cfg.get(kind) if hasattr(cfg, "get") else None  # eval composes one of method= / memory=
        if node and node.name:
            cls = registry.get(kind, str(node.name))
            if not callable(getattr(cls, "set_compression_ratio", None)):
                refuse(f"{kind}={node.name}")
            return


def refuse(name: str) -> None:
    raise ConfigError(f"task=compression: {name} has no set_compression_ratio (it cannot compress to a ratio); "
                      f"use one of {', '.join(ratio_systems())}")


def prepare(system: Any, protocol: Protocol | None, name: str) -> Any:
    """``system`` set to the protocol's ratio (and prefill, where it streams) before any ingest."""
    if protocol is None:
        return system
    setter = getattr(system, "set_compression_ratio", None)
    if not callable(setter):
        refuse(name)
    set_budget_rounding(protocol.budget)
    setter(protocol.ratio)
    prefill = getattr(system, "set_compression_prefill", None)
    if callable(prefill):
        prefill(protocol.prefill)
    return system


ASKED_EMPTY, ASKED_AGAIN = "empty", "again"  # results.json protocol.asked: kvpress's compress_questions / not
IN_CONTEXT = "question_in_context"  # Question.meta: the question text the query-aware protocol compressed


def query_aware_samples(samples: list[Sample], ask_again: bool = False) -> list[Sample]:
    """Each sample with its question appended to the history text (``task.query_aware=true``) and, as
    kvpress's ``compress_questions`` does, the question then asked empty (``ask_again``: asked as it is).

    kvpress's query-aware protocol compresses context + question once per question, so a history
    must be a document (``sessions`` empty) with one question; others are refused in one line. The
    asked question keeps its id, gold and meta, and ``meta["question_in_context"]`` holds its text
    (predictions.jsonl records that text as the question)."""
    out = []
    for s in samples:
        h = s.history
        if h.sessions:
            raise DataError(h.id, "task.query_aware=true needs document histories (the question is appended to "
                                  "the history text); this history has sessions", field="sessions")
        if len(s.questions) > 1:
            raise DataError(h.id, f"task.query_aware=true compresses the context with its question, once per "
                                  f"question: the history has {len(s.questions)} questions (one is needed)",
                            field="questions")
        text = h.text if not s.questions else f"{h.text}\n{s.questions[0].question}"
        asked = [q if ask_again else replace(q, question="", meta={**(q.meta or {}), IN_CONTEXT: q.question})
                 for q in s.questions]
        out.append(Sample(History(h.id, [], text, list(h.speakers)), asked))
    derive = getattr(samples, "derive", None)  # a loader's Samples: its source, quirks and errata kept
    return derive(out) if callable(derive) else out


def protocol_record(protocol: Protocol) -> dict[str, Any]:
    """results.json ``protocol``."""
    out = {"name": "kvpress", "ratio": protocol.ratio, "query_aware": protocol.query_aware,
           "budget": BUDGET_RULE if protocol.budget == "ceil" else KVPRESS_BUDGET_RULE, "prefill": protocol.prefill}
    if protocol.query_aware:  # how the question was asked after the compression (report table=ruler reads it)
        out["asked"] = ASKED_AGAIN if protocol.ask_again else ASKED_EMPTY
    return out
