"""The one LLM backend every system of an ``eval`` shares, as the evaluator hands it to them.

:class:`SharedLLM` wraps the built backend (``llm=hf`` / ``llm=openai``, with its call cache) and
is what memory systems hold as ``self.llm``. It adds four things and changes no reply but to hide a secret:

- while the evaluator's workers run (:mod:`ctxbench.evaluation.pool`), each call releases the workers'
  lock for its length, so other histories and questions go on while it waits;
- on a backend that generates in batches (``llm=hf``, ``batch_size > 1``), calls made by several
  workers at once are generated together (:class:`CallBatcher`): they are sent as one
  ``chat_batch`` once no running worker can add a call, or ``batch_size`` are waiting;
- every call is handed to the calling task's ``log_samples`` scopes (:mod:`.scope`);
- every reply's text is scrubbed of secrets (:func:`scrub_reply`: the backend's own, such as the key
  ``llm=openai`` sends, and those :func:`~ctxbench.core.secrets.scrub_text` knows) before a system sees
  it — a cached reply too, stored before its backend scrubbed replies itself.

Everything else (``meter``, ``count_tokens``, ``context_window``, ``tokenizer`` ...) is the
backend's own.
"""
from __future__ import annotations

import contextvars
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ctxbench.core.secrets import scrub_text
from ctxbench.llm.base import BackendWrapper, ChatResult, Message, backend_kwargs
from ctxbench.llm.scope import call_record, log_call

DEFAULTS = {"max_new_tokens": 64, "temperature": 0.0, "phase": "answer", "json_mode": False, "schema": None,
            "seed": None, "stop": None}


def scrub_reply(backend: Any, r: ChatResult) -> ChatResult:
    """``r`` with its text scrubbed of ``backend``'s ``known_secrets()`` (if it has them) and of
    :func:`~ctxbench.core.secrets.scrub_text`'s; ``r`` itself when there was nothing to hide."""
    known = getattr(backend, "known_secrets", None)
    text = scrub_text(r.text, extra=known() if callable(known) else [])
    return r if text == r.text else dataclasses.replace(r, text=text)


def call_params(kw: dict[str, Any]) -> dict[str, Any]:
    unknown = set(kw) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"chat() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    return {**DEFAULTS, **kw}


class SharedLLM(BackendWrapper):
    """The evaluator's shared backend (see the module doc)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.gate: Any = None  # the workers' Gate while they run (eval_pool); None: calls run as they come
        self.batcher: CallBatcher | None = None
        self.batch_sizes: list[int] = []  # every batch the batcher generated, over all runs (bench, tests)

    # ---- what the evaluator sets -------------------------------------------------------------
    def serve(self, gate: Any, batch: bool) -> None:
        """Run calls under the workers' ``gate`` (None: back to plain calls); ``batch``: gather them."""
        self.gate = gate
        self.batcher = CallBatcher(self.inner, gate, self.batch_sizes) if gate is not None and batch else None

    def batch_size(self) -> int:
        """How many calls this backend generates at once (``llm=hf``'s ``batch_size``; 1 for others)."""
        return int(getattr(self.inner, "batch_size", 1) or 1) if hasattr(self.inner, "chat_batch") else 1

    def concurrency(self) -> int:
        """How many calls the backend serves at once: ``llm=openai``'s ``concurrency``, ``llm=hf``'s batch."""
        c = getattr(self.inner, "concurrency", None)
        return int(c) if isinstance(c, int) and c > 0 else self.batch_size()

    # ---- the ChatLLM interface (model_name, context_window, count_tokens: the backend's) --------
    @property
    def meter(self) -> Any:
        return self.inner.meter

    def chat(self, messages: list[Message], **kw: Any) -> ChatResult:
        params = call_params(kw)
        with self._released():
            if self.batcher is not None:
                r = self.batcher.submit(messages, params)
            else:
                r = self.inner.chat(messages, **backend_kwargs(params))
        r = scrub_reply(self.inner, r)
        log_call(call_record(params["phase"], r, messages, params))
        return r

    def chat_batch(self, batch: list[list[Message]], **kw: Any) -> list[ChatResult]:
        params = call_params(kw)
        with self._released():
            if hasattr(self.inner, "chat_batch"):
                rs = self.inner.chat_batch(batch, **backend_kwargs(params))
            else:
                rs = [self.inner.chat(m, **backend_kwargs(params)) for m in batch]
        rs = [scrub_reply(self.inner, r) for r in rs]
        for m, r in zip(batch, rs):
            log_call(call_record(params["phase"], r, m, params))
        return rs

    def released(self) -> Any:
        """The workers' lock let go for a wait that is not a call of this backend (memory=http's request to its
        remote), so other histories and questions go on meanwhile; a no-op off the workers."""
        return self._released()

    def _released(self) -> Any:
        import contextlib

        return self.gate.released() if self.gate is not None else contextlib.nullcontext()


@dataclass
class _Call:
    messages: list[Message]
    params: dict[str, Any]
    result: ChatResult | None = None
    error: BaseException | None = None


class CallBatcher:
    """Calls from several workers generated as one ``chat_batch`` (see the module doc).

    A waiting caller becomes the batch's leader when ``batch_size`` calls wait or no worker is
    running system code (``gate.active == 0``: nobody can add one); it generates every waiting
    call, grouped by generation parameters, in an empty context (the backend counts them in its
    total), and each caller then counts its own reply in its task's scopes.
    """

    def __init__(self, inner: Any, gate: Any, sizes: list[int] | None = None):
        self.inner = inner
        self.gate = gate
        self.size = max(1, int(getattr(inner, "batch_size", 1) or 1))
        self.waiting: list[_Call] = []
        self.leading = False
        self.batches: list[int] = sizes if sizes is not None else []  # the size of each batch generated

    def submit(self, messages: list[Message], params: dict[str, Any]) -> ChatResult:
        call = _Call(messages, params)
        changed = self.gate.changed
        with changed:
            self.waiting.append(call)
            changed.notify_all()
            while call.result is None and call.error is None:
                if not self.leading and self.waiting and (len(self.waiting) >= self.size or self.gate.active <= 0):
                    batch, self.waiting, self.leading = self.waiting, [], True
                    changed.release()
                    try:
                        self._generate(batch)
                    finally:
                        changed.acquire()
                        self.leading = False
                        changed.notify_all()
                    continue
                changed.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        self.inner.meter.count_in_scopes(params["phase"], call.result)
        return call.result

    def _generate(self, batch: list[_Call]) -> None:
        groups: dict[str, list[_Call]] = {}
        for c in batch:
            groups.setdefault(json.dumps(c.params, sort_keys=True, default=str), []).append(c)
        for calls in sorted(groups.values(), key=len, reverse=True):
            self.batches.append(len(calls))
            try:
                kw = backend_kwargs(calls[0].params)
                rs = contextvars.Context().run(self.inner.chat_batch, [c.messages for c in calls], **kw)
                for c, r in zip(calls, rs):
                    c.result = r
            except BaseException as e:  # every caller of the batch sees the error
                for c in calls:
                    c.error = e
