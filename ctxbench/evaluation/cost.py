"""Cost accounting: the one code path that turns a system's answer and ingest into recorded cost.

A system on the shared LLM backend is metered from the outside (the backend meter's delta over each
task's call scope, :mod:`ctxbench.llm.scope`), whatever the system reports; a method decoding with its
own model counts its tokens itself. Everything else (context tokens, memory footprint, extras) is
the system's own report.
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Usage


def scope_phase(scope: Any, llm: Any, phase: str) -> tuple[int, int, int, int, int, int]:
    """(prompt tokens, completion tokens, calls, failures, empty replies, calls served by the call cache) of
    ``llm``'s calls in one task's scope."""
    if llm is None or not hasattr(llm, "meter"):
        return (0, 0, 0, 0, 0, 0)
    c = scope.count(llm.meter, phase)
    return (c.prompt_tokens, c.completion_tokens, c.calls, c.failures, c.empty, c.cached)


def cached_calls(meter: tuple[int, ...]) -> dict[str, int]:
    """``{"cached_calls": n}`` when calls of a :func:`scope_phase` count were served by the call cache
    (their seconds are a lookup's, not a model's: latency percentiles leave such answers out)."""
    return {"cached_calls": int(meter[5])} if len(meter) > 5 and meter[5] else {}


def empty_calls(meter: tuple[int, ...]) -> dict[str, int]:
    """``{"empty_calls": n}`` when calls of a :func:`scope_phase` count returned no text, else ``{}``
    (health counts them as failed calls: :mod:`ctxbench.metrics.health`)."""
    return {"empty_calls": int(meter[4])} if len(meter) > 4 and meter[4] else {}


def account_answer(pred: Prediction, llm: Any, meter: tuple[int, ...]) -> Usage:
    """The Usage recorded for one answer.

    A system on the shared LLM backend (``llm`` given) is metered: its answer tokens, calls and
    failures are the backend meter's delta over ``answer()``, whatever the system says. A system
    that decodes with its own model (methods) counts its tokens itself. Everything else (context
    tokens, memory footprint, extras) is the system's own report.
    """
    usage = pred.usage if isinstance(pred.usage, Usage) else Usage.from_dict(dict(pred.usage or {}))
    if llm is not None:
        usage.answer_prompt_tokens, usage.answer_completion_tokens, usage.answer_calls = meter[:3]
        usage.extra["failed_calls"] = int(meter[3])
        usage.extra.update(empty_calls(meter))
        usage.extra.update(cached_calls(meter))
    return usage


def account_construction(system: System, usage: Usage, meter: tuple[int, ...], seconds: float) -> dict[str, Any]:
    """What ingesting one history cost: the system's own count if it keeps one (a resumed store
    remembers calls an earlier process made), else the backend meter's delta over ``ingest()``;
    ``outputs``: the structured replies building it asked for (:meth:`System.output_counts`), carried
    once per history (each record's own ``outputs`` are its answer's)."""
    cu = system.construction_usage() or usage
    reported = (cu.construction_prompt_tokens, cu.construction_completion_tokens, cu.construction_calls)
    tokens = reported if any(reported) else meter[:3]
    return {"prompt_tokens": int(tokens[0]), "completion_tokens": int(tokens[1]), "calls": int(tokens[2]),
            "failed_calls": int(meter[3]), **empty_calls(meter), **cached_calls(meter), "seconds": round(max(seconds, float(cu.ingest_seconds or 0.0)), 4),
            "memory_items": int(usage.memory_items), "memory_tokens": int(usage.memory_tokens),
            "kv_bytes": int(usage.kv_bytes), "outputs": system.output_counts()}


def failed_answer(pred: Prediction, usage: Usage) -> bool:
    """Every LLM call of the answer failed, or one failed and left no text, or the system says it gave no
    answer (``meta["failed"]``: memory=http's remote did not answer; ``meta["error"]`` says why)."""
    if (pred.meta or {}).get("failed") is True:
        return True
    failed = int(usage.extra.get("failed_calls", 0) or 0)
    return failed > 0 and (failed >= usage.answer_calls or not pred.text.strip())


def history_tokens(history: History, llm: Any, system: Any) -> int | None:
    """Tokens of the whole history as the full-context baseline renders it (``render_history``, LoCoMo
    style), counted by the shared backend (``llm.count_tokens``), else the system's own tokenizer (a
    method); None when neither is there. Recorded once per history (``construction.history_tokens``): the
    denominator of the held-context guard (:mod:`ctxbench.metrics.guards`)."""
    from ctxbench.core.render import render_history

    text = render_history(history, "locomo")
    if llm is not None and callable(getattr(llm, "count_tokens", None)):
        return int(llm.count_tokens(text))
    tok = getattr(system, "tokenizer", None)
    if tok is None or not callable(tok):
        return None
    return len(tok(text, add_special_tokens=False)["input_ids"])
