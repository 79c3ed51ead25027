"""Structured LLM calls: a JSON Schema per call, enforced by the backend, every outcome counted.

A system asks ``self.call(messages, schema, kind="extract")``. The backend decodes under the
schema where it can (``llm=hf`` grammar, ``llm=openai`` json_schema: :mod:`ctxbench.llm.schema`),
and the reply is read strictly. Each request ends in exactly one outcome, counted per phase and
per kind in the system's ``counts`` (persisted with its state, so a resumed run counts all):

- ``valid``: the value is returned;
- ``truncated``: the reply hit its token limit; it is never parsed from fragments;
- ``invalid``: complete but not JSON for the schema, even after its harmless variants were
  normalised (possible only without enforcement);
- ``failed``: the backend call failed (the backend already retried transport errors).

Besides the outcome, a valid reply that needed normalising (:mod:`ctxbench.llm.normalize`: ``Name:
fact`` for ``Name fact``, a code fence ...) counts ``normalised`` once and each kind it needed as
``normalised:<kind>``; a server-enforced reply that needed any also counts ``unenforced`` (the
server did not enforce the schema it was sent).

Counts made while a system answers go to that answer's own counter (:func:`own_counts`, opened by
``MemorySystem.answer``), never to the system's: answers run side by side under ``concurrency``,
so a count on the shared instance would mix questions. The system's ``counts`` are therefore what
building the history counted, and each answer reports its own (``Prediction.outputs``).

A retry happens only when it changes something, within ``retries`` (``memory.json_retries``): a
truncated reply is asked again once with twice the token budget (up to ``MAX_RETRY_TOKENS``); an
invalid one is asked again once with the validator's message shown to the model, and a second
invalid reply after that feedback ends the request. A request identical to one that already gave an
unusable reply (same messages, schema and budget; temperature 0) is never sent again while the
caller builds one history (:meth:`StructuredCaller.forget` starts the next): it ends as that one
did (answers, which run side by side, keep to the retry rules only), and ``retries_saved`` counts
each call not sent, as does a retry ``retries`` still allowed
after the feedback failed. So a history's construction pays for an unusable reply once; a rerun
replays the same calls from the LLM cache (:mod:`ctxbench.llm.cache` stores every complete reply,
invalid ones too) and makes the same decisions, so it reports the same counts.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

from ctxbench.llm.base import ChatLLM, Message
from ctxbench.llm.schema import Schema, SchemaError, read_reply
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


def request_key(messages: list[Message], schema: Schema, budget: int) -> str:
    """What identifies a structured request (all are sent at temperature 0)."""
    blob = json.dumps([messages, schema, int(budget)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class StructuredCaller:
    """Calls an LLM for one JSON value per request; see the module doc for outcomes and retries."""

    def __init__(self, llm: ChatLLM, retries: int = 1, counts: Counter | None = None) -> None:
        self.llm, self.retries = llm, int(retries)
        self.counts: Counter = counts if counts is not None else Counter()
        self.last_error = ""  # why the last request returned None (for an agent loop's error message)
        self.unusable: dict[str, tuple[str, str]] = {}  # request key -> (outcome, error) it gave
        self._lock = threading.Lock()

    def forget(self, unusable: dict[str, list[str]] | None = None) -> None:
        """Start a history: no request has given an unusable reply yet, or those of ``unusable``
        (:meth:`remembered` of a resumed history's construction)."""
        with self._lock:
            self.unusable = {k: (v[0], v[1]) for k, v in (unusable or {}).items()}

    def remembered(self) -> dict[str, list[str]]:
        """The requests that gave an unusable reply, JSON-able (persisted with a history's state)."""
        with self._lock:
            return {k: list(v) for k, v in self.unusable.items()}

    def _count(self, phase: str, kind: str, field: str, n: int = 1) -> None:
        counter_for(self.counts)[f"{PREFIX}|{phase}|{kind}|{field}"] += n

    def __call__(self, messages: list[Message], schema: Schema, *, kind: str, phase: str = "construction",
                 max_new_tokens: int = 256, retries: int | None = None) -> Any | None:
        """The validated value, or None with the outcome counted and ``last_error`` set.
        ``retries`` overrides the caller's (an agent loop that feeds errors back itself passes 0)."""
        self._count(phase, kind, "calls")
        msgs, budget = list(messages), int(max_new_tokens)
        left = self.retries if retries is None else int(retries)
        grown = fed_back = False
        while True:
            key = request_key(msgs, schema, budget) if phase == "construction" else None
            with self._lock:
                known = self.unusable.get(key) if key else None
            if known is not None:  # this very request already gave an unusable reply: not sent again
                self._count(phase, kind, "retries_saved")
                outcome, self.last_error = known
                break
            r = self.llm.chat(msgs, max_new_tokens=budget, temperature=0.0, phase=phase, json_mode=True,
                              schema=schema)
            if r.failed:
                outcome, self.last_error = "failed", f"backend failure: {r.error}"
                break
            if r.truncated:
                outcome, self.last_error = "truncated", f"the reply was cut at {budget} tokens"
                self._remember(key, outcome)
                if grown or left <= 0 or budget * 2 > MAX_RETRY_TOKENS:
                    break
                budget, grown, left = budget * 2, True, left - 1  # the one change that can help a cut reply
                self._count(phase, kind, "retried")
                continue
            try:
                value, kinds = read_reply(r.text, schema)
            except SchemaError as e:
                outcome, self.last_error = "invalid", str(e)
                self._remember(key, outcome)
                if fed_back and left > 0:  # the feedback changed nothing: asking again cannot help
                    self._count(phase, kind, "retries_saved")
                if fed_back or left <= 0:
                    break
                msgs = list(messages) + [{"role": "assistant", "content": r.text[:400]},
                                         {"role": "user", "content": f"Invalid: {e}. Reply with the JSON only."}]
                fed_back, left = True, left - 1
                self._count(phase, kind, "retried")
                continue
            self._count_normalised(phase, kind, kinds, r.constrained)
            self._count(phase, kind, "valid")
            return value
        self._count(phase, kind, outcome)
        return None

    def _remember(self, key: str | None, outcome: str) -> None:
        if key is None:  # answers stay independent of each other (and of concurrency)
            return
        with self._lock:
            self.unusable[key] = (outcome, self.last_error)

    def _count_normalised(self, phase: str, kind: str, kinds: list[str], constrained: bool) -> None:
        if not kinds:
            return
        self._count(phase, kind, "normalised")
        for k in dict.fromkeys(kinds):
            self._count(phase, kind, f"normalised:{k}")
        if constrained:
            self._count(phase, kind, "unenforced")


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
