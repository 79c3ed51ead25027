"""Structured LLM calls: a JSON Schema per call, enforced by the backend, every outcome counted.

A system asks ``self.call(messages, schema, kind="extract")``. The backend decodes under the
schema where it can (``llm=hf`` grammar, ``llm=openai`` json_schema: :mod:`ctxbench.llm.schema`),
and the reply is read strictly. Each request ends in exactly one outcome, counted per phase and
per kind in the system's ``counts`` (persisted with its state, so a resumed run counts all):

- ``valid``: the value is returned;
- ``truncated``: the reply hit its token limit; it is never parsed from fragments;
- ``invalid``: complete but not JSON for the schema (possible only without enforcement);
- ``failed``: the backend call failed (the backend already retried transport errors).

Counts made while a system answers go to that answer's own counter (:func:`own_counts`, opened by
``MemorySystem.answer``), never to the system's: answers run side by side under ``concurrency``,
so a count on the shared instance would mix questions. The system's ``counts`` are therefore what
building the history counted, and each answer reports its own (``Prediction.outputs``).

A retry happens only when it changes something: a truncated reply is asked again once with twice
the token budget; an invalid one is asked again with the error shown to the model. A retry that
would send the same request (temperature 0, same prompt, same budget) is never made.
"""
from __future__ import annotations

import contextvars
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

from ctxbench.llm.base import ChatLLM, Message
from ctxbench.llm.schema import Schema, SchemaError, parse_reply
from ctxbench.metrics.structured import PREFIX, structured_report

MAX_RETRY_TOKENS = 1024  # a truncated reply is retried with 2x its budget, up to this
_ANSWER_COUNTS: contextvars.ContextVar[Counter | None] = contextvars.ContextVar("ctxbench_answer_counts",
                                                                                 default=None)


@contextmanager
def own_counts() -> Iterator[Counter]:
    """Count what this context does (one answer) in a Counter of its own instead of the system's."""
    mine: Counter = Counter()
    token = _ANSWER_COUNTS.set(mine)
    try:
        yield mine
    finally:
        _ANSWER_COUNTS.reset(token)


def counter_for(counts: Counter) -> Counter:
    """Where a count made now goes: the answer's own counter inside :func:`own_counts`, else ``counts``."""
    mine = _ANSWER_COUNTS.get()
    return counts if mine is None else mine


class StructuredCaller:
    """Calls an LLM for one JSON value per request; see the module doc for outcomes and retries."""

    def __init__(self, llm: ChatLLM, retries: int = 1, counts: Counter | None = None) -> None:
        self.llm, self.retries = llm, int(retries)
        self.counts: Counter = counts if counts is not None else Counter()
        self.last_error = ""  # why the last request returned None (for an agent loop's error message)

    def _count(self, phase: str, kind: str, field: str) -> None:
        counter_for(self.counts)[f"{PREFIX}|{phase}|{kind}|{field}"] += 1

    def __call__(self, messages: list[Message], schema: Schema, *, kind: str, phase: str = "construction",
                 max_new_tokens: int = 256, retries: int | None = None) -> Any | None:
        """The validated value, or None with the outcome counted and ``last_error`` set.
        ``retries`` overrides the caller's (an agent loop that feeds errors back itself passes 0)."""
        self._count(phase, kind, "calls")
        msgs, budget, last = list(messages), int(max_new_tokens), None
        for attempt in range((self.retries if retries is None else int(retries)) + 1):
            if attempt:
                self._count(phase, kind, "retried")
            r = self.llm.chat(msgs, max_new_tokens=budget, temperature=0.0, phase=phase, json_mode=True,
                              schema=schema)
            if r.failed:
                outcome, self.last_error = "failed", f"backend failure: {r.error}"
                break
            if r.truncated:
                outcome, self.last_error = "truncated", f"the reply was cut at {budget} tokens"
                if budget * 2 > MAX_RETRY_TOKENS:
                    break
                budget *= 2  # the one change that can help a cut reply
                continue
            try:
                value = parse_reply(r.text, schema, constrained=r.constrained)
            except SchemaError as e:
                outcome, self.last_error = "invalid", str(e)
                if r.text == last:  # the feedback changed nothing: asking again cannot help
                    break
                last = r.text
                msgs = list(messages) + [{"role": "assistant", "content": r.text[:400]},
                                         {"role": "user", "content": f"Invalid: {e}. Reply with the JSON only."}]
                continue
            self._count(phase, kind, "valid")
            return value
        self._count(phase, kind, outcome)
        return None


def output_counts(counts: Counter | dict[str, Any]) -> dict[str, Any]:
    """What the System contract's ``output_counts`` reports: requests, unusable ones, the breakdown,
    and the system's other counters (``counts``: flushes, evolutions, recalls ...; left out when none)."""
    rep = structured_report(counts)
    calls = sum(ph["calls"] for ph in rep.values())
    bad = sum(ph["invalid"] + ph["truncated"] for ph in rep.values())
    out: dict[str, Any] = {"structured_calls": calls, "invalid_outputs": bad, "structured_output": rep}
    other = {k: int(n) for k, n in sorted(counts.items()) if not str(k).startswith(f"{PREFIX}|")}
    if other:
        out["counts"] = other
    return out
