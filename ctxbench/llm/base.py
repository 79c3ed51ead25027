"""The chat-model interface every memory system and the evaluator use, and usage counting.

A backend (``llm=hf`` local transformers, ``llm=openai`` any OpenAI-compatible server) is built
with ``registry.build("llm", cfg)`` and implements :meth:`ChatLLM.chat`. Every call is counted in
the backend's :class:`UsageMeter` under a *phase* ("construction" while building memory,
"answer" while answering), so a system reports what it really spent. Each reply says where its
token counts come from (``ChatResult.token_source``: the server's ``usage``, a real tokenizer of
the model, or an estimate; :mod:`.token_count`), and the meter counts calls per source.

A backend that cannot work at all (server unreachable, key refused, model unknown, too many
failed calls in a row) raises :class:`LLMUnavailable`, which the CLI prints as one line. A
backend may offer ``preflight()``: a cheap check (server reachable, key accepted, model served)
that callers run before loading anything heavy; :func:`preflight` calls it when present.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxbench.core.errors import CtxbenchError
from ctxbench.llm.scope import PhaseCount, active_scopes, innermost

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


class LLMUnavailable(CtxbenchError, RuntimeError):
    """The chat backend cannot be used at all; the message is one line naming the cause and the fix."""


@dataclass
class ChatResult:
    """One reply. ``truncated``: generation stopped at ``max_new_tokens`` (the reply may be cut);
    ``stopped``: one of the call's ``stop`` strings ended the reply (:mod:`.stop`; the text is what came before it);
    ``constrained``: the backend enforced the call's schema while decoding (a complete reply is valid);
    ``token_source``: how ``prompt_tokens``/``completion_tokens`` were made — ``"server"``,
    ``"tokenizer"``, ``"estimate"`` or ``"cache"`` (:mod:`.token_count`); ``""`` from a backend
    that does not say (counted as ``"unknown"``); ``served_model``: the model the server says answered
    (a reply's ``model``; ``"cache"`` for a cached reply that did not store it, ``""``: not said)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False
    failed: bool = False
    error: str = ""
    truncated: bool = False
    stopped: bool = False
    constrained: bool = False
    token_source: str = ""
    served_model: str = ""


def empty_reply(r: ChatResult) -> bool:
    """A successful call that returned no text (a reasoning model out of budget): no answer either."""
    return not r.failed and not r.text.strip()


@dataclass
class UsageMeter:
    """Calls and tokens per phase: the backend's total, and each running task's share.

    :meth:`add` counts a call in the total and in every :func:`~ctxbench.llm.scope.call_scope` of
    the calling context; :meth:`get` is the innermost scope's count inside a scope (a task's own
    calls, exact while other tasks run beside it), the total outside any; :meth:`snapshot` and
    :meth:`total` are always the total (:mod:`.scope`). ``served``: successful calls per model the
    server said answered them (``ChatResult.served_model``; results.json ``llm.served_models``).
    """

    phases: dict[str, PhaseCount] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, phase: str, r: ChatResult) -> None:
        with self._lock:
            _count(self.phases.setdefault(phase, PhaseCount()), r)
            if r.served_model and not r.failed:
                self.served[r.served_model] = self.served.get(r.served_model, 0) + 1
        self.count_in_scopes(phase, r)

    def served_models(self) -> dict[str, int]:
        """A copy of :attr:`served`, most calls first."""
        with self._lock:
            return dict(sorted(self.served.items(), key=lambda kv: (-kv[1], kv[0])))

    def count_in_scopes(self, phase: str, r: ChatResult) -> None:
        """Count ``r`` in the calling context's scopes only (its total was counted where it was made)."""
        for scope in active_scopes():
            _count(scope.counts.setdefault((id(self), phase), PhaseCount()), r)

    def get(self, phase: str) -> PhaseCount:
        scope = innermost()
        if scope is not None:
            return scope.count(self, phase)
        return self.total(phase)

    def total(self, phase: str) -> PhaseCount:
        return self.phases.get(phase, PhaseCount())

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per phase: calls, tokens, failures, cached (ints) and ``by_source`` (a copy): JSON-able."""
        with self._lock:
            return {k: {**vars(v), "by_source": dict(v.by_source)} for k, v in self.phases.items()}


def _count(c: PhaseCount, r: ChatResult) -> None:
    c.calls += 1
    c.prompt_tokens += r.prompt_tokens
    c.completion_tokens += r.completion_tokens
    c.failures += int(r.failed)
    c.empty += int(empty_reply(r))
    c.cached += int(r.cached)
    if not r.failed:  # a failed call has no counts to source
        src = r.token_source or "unknown"
        c.by_source[src] = c.by_source.get(src, 0) + 1


class ChatLLM(Protocol):
    meter: UsageMeter
    model_name: str

    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False,
             schema: dict[str, Any] | None = None, seed: int | None = None,
             stop: list[str] | None = None) -> ChatResult:
        """One reply. ``schema`` (a JSON Schema, :mod:`.schema`): the backend enforces it where it can
        and says so in ``ChatResult.constrained``; ``json_mode`` without a schema: any JSON value.
        ``seed`` (optional; callers pass it only when set): the sampling seed of this call.
        ``stop`` (optional; callers pass it only when set): strings that end the reply where they
        first occur after its first non-whitespace character (:mod:`.stop`); the reply is the text
        before it and ``ChatResult.stopped`` says so. Every backend honours it."""

    def count_tokens(self, text: str) -> int: ...

    @property
    def context_window(self) -> int: ...


class BackendWrapper:
    """A backend around another one, ``inner`` (the call cache, the evaluator's shared backend): its
    model name, context window, token counting and every other attribute are the inner backend's."""

    inner: Any

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def context_window(self) -> int:
        return self.inner.context_window

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # tokenizer, cache_id, truncated_calls, placement ...
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def backend_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """A backend call's keywords from ``params``; ``schema``, ``seed`` and ``stop`` only when given (a
    call without them is sent, and cached, as before they existed)."""
    kw = {k: v for k, v in params.items() if k not in ("schema", "seed", "stop")}
    if params.get("schema") is not None:
        kw["schema"] = params["schema"]
    if params.get("seed") is not None:
        kw["seed"] = int(params["seed"])
    if params.get("stop"):
        kw["stop"] = list(params["stop"])
    return kw


def as_messages(prompt: str, system: str | None = None) -> list[Message]:
    msgs: list[Message] = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": prompt})
    return msgs


def preflight(llm: Any) -> None:
    """Run the backend's cheap availability check, if it has one (raises :class:`LLMUnavailable`)."""
    check = getattr(llm, "preflight", None)
    if callable(check):
        check()
