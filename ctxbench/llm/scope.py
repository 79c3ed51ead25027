"""Per-task accounting of LLM calls: what one ingestion or one answer spent, whatever runs beside it.

The evaluator runs each history's ingestion and each question's answer as a *task* inside a
:func:`call_scope`. Every :class:`~ctxbench.llm.base.UsageMeter` counts a call in its own total
and in every scope of the context that made the call (a :mod:`contextvars` stack, so a task's
calls are its own even while other tasks run on other threads). ``meter.get(phase)`` inside a
scope is that scope's count for that meter; outside any scope it is the meter's total.

Systems take deltas of ``llm.meter.get(phase)`` around their own work (``MemorySystem.ingest``
around each step), so those deltas stay exact under concurrency, and the evaluator reads each
task's cost from its scope. ``meter.snapshot()`` is always the total (results.json ``llm.meter``).

Work handed to another thread keeps its scope when the thread runs it in a copy of the caller's
context (``contextvars.copy_context().run``: ``llm=openai``'s ``chat_batch``); the evaluator's
call batcher generates in an empty context and counts each reply in its caller's scopes
(:meth:`~ctxbench.llm.base.UsageMeter.count_in_scopes`).

A scope can also keep each call (messages, parameters, reply) for ``log_samples``
(:mod:`ctxbench.evaluation.sample_log`): the shared backend (:class:`ctxbench.llm.shared.SharedLLM`) hands
every call to :func:`log_call`, and a scope made with ``keep_calls=True`` keeps it, one made with
``sink=`` passes it on as it completes (construction calls are streamed to a file, so a killed
run keeps what it logged).
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_SCOPES: contextvars.ContextVar[tuple["CallScope", ...]] = contextvars.ContextVar("ctxbench_call_scopes",
                                                                                   default=())



@dataclass
class PhaseCount:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    empty: int = 0  # successful calls that returned no text (health counts them as failed)
    cached: int = 0
    by_source: dict[str, int] = field(default_factory=dict)  # successful calls per ChatResult.token_source


@dataclass
class CallScope:
    """The calls of one task: counts per (meter, phase), and, when asked, every call in order."""

    keep_calls: bool = False
    sink: Callable[[dict[str, Any]], None] | None = None
    counts: dict[tuple[int, str], Any] = field(default_factory=dict)  # (id(meter), phase) -> PhaseCount
    calls: list[dict[str, Any]] = field(default_factory=list)

    def count(self, meter: Any, phase: str) -> Any:
        """``meter``'s count for ``phase`` in this scope (a PhaseCount; zeros when none)."""
        return self.counts.get((id(meter), phase), PhaseCount())

    def log(self, call: dict[str, Any]) -> None:
        if self.keep_calls:
            self.calls.append(call)
        if self.sink is not None:
            self.sink(call)


@contextmanager
def call_scope(keep_calls: bool = False, sink: Callable[[dict[str, Any]], None] | None = None
               ) -> Iterator[CallScope]:
    """Count (and, if asked, keep) the calls made in this context in a new scope."""
    scope = CallScope(keep_calls=keep_calls, sink=sink)
    token = _SCOPES.set(_SCOPES.get() + (scope,))
    try:
        yield scope
    finally:
        _SCOPES.reset(token)


def active_scopes() -> tuple[CallScope, ...]:
    return _SCOPES.get()


def innermost() -> CallScope | None:
    scopes = _SCOPES.get()
    return scopes[-1] if scopes else None


def log_call(call: dict[str, Any]) -> None:
    """Hand one call record to every scope of the calling context that logs calls."""
    for scope in _SCOPES.get():
        if scope.keep_calls or scope.sink is not None:
            scope.log(call)


def call_record(phase: str, r: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> dict[str, Any]:
    """One call as ``log_samples`` writes it (the writer scrubs secrets)."""
    rec: dict[str, Any] = {"phase": phase, "messages": [dict(m) for m in messages],
                           "params": {k: v for k, v in params.items() if k != "phase" and v is not None},
                           "reply": r.text, "prompt_tokens": r.prompt_tokens,
                           "completion_tokens": r.completion_tokens}
    for flag in ("cached", "failed", "truncated", "constrained"):
        if getattr(r, flag, False):
            rec[flag] = True
    if getattr(r, "error", ""):
        rec["error"] = r.error
    source = getattr(r, "token_source", None)
    if source:
        rec["token_source"] = source
    return rec
