"""A scripted ChatLLM test double: replies from a queue or a function, tokens = whitespace words.

    llm = ScriptedLLM(["Paris", "7 May 2023"])           # replies in order, then `default`
    llm = ScriptedLLM(lambda messages, **kw: "yes")      # computed replies (str or ChatResult)
    llm = ScriptedLLM("same answer", context_window=50)  # constant reply, small window

Every call is recorded in ``llm.calls`` (messages, phase, params) and counted in ``llm.meter``
like a real backend; a call's ``stop`` strings cut a scripted reply as the backends do
(:mod:`ctxbench.llm.stop`; recorded as ``stop`` in ``llm.calls`` when given). ``fail_on`` (set of 0-based call indices) makes those calls return
``ChatResult(failed=True)``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ctxbench.llm.base import ChatResult, Message, UsageMeter
from ctxbench.llm.stop import apply_stop


class ScriptedLLM:
    def __init__(self, responses: list[str] | str | Callable[..., Any] | None = None, *,
                 context_window: int = 4096, model_name: str = "scripted", default: str = "",
                 fail_on: set[int] | None = None):
        self._fn = responses if callable(responses) else None
        self._const = responses if isinstance(responses, str) else None
        self._queue = deque(responses) if isinstance(responses, (list, tuple)) else deque()
        self._window = context_window
        self.model_name = model_name
        self.cache_id = model_name
        self.default = default
        self.fail_on = set(fail_on or ())
        self.meter = UsageMeter()
        self.calls: list[dict[str, Any]] = []

    @property
    def context_window(self) -> int:
        return self._window

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False, schema: dict[str, Any] | None = None,
             stop: list[str] | None = None) -> ChatResult:
        idx = len(self.calls)
        params = dict(max_new_tokens=max_new_tokens, temperature=temperature, phase=phase, json_mode=json_mode,
                      schema=schema)
        self.calls.append({"messages": [dict(m) for m in messages], **params, **({"stop": list(stop)} if stop else {})})
        prompt_tokens = sum(self.count_tokens(m["content"]) for m in messages)
        if idx in self.fail_on:
            r = ChatResult("", 0, 0, failed=True, error="scripted failure")
        else:
            reply = self._next(messages, params)
            if isinstance(reply, ChatResult):
                r = reply
            else:  # the backends' stop rule (ctxbench/llm/stop.py)
                text, stopped = apply_stop(str(reply), stop or [])
                r = ChatResult(text, prompt_tokens, self.count_tokens(text), stopped=stopped)
        self.meter.add(phase, r)
        return r

    def chat_batch(self, batch: list[list[Message]], **kw: Any) -> list[ChatResult]:
        return [self.chat(m, **kw) for m in batch]

    def _next(self, messages: list[Message], params: dict[str, Any]) -> Any:
        if self._fn is not None:
            return self._fn(messages, **params)
        if self._const is not None:
            return self._const
        return self._queue.popleft() if self._queue else self.default

    @property
    def prompts(self) -> list[str]:
        """The last user message of every call, in order."""
        return [c["messages"][-1]["content"] for c in self.calls]
