"""A borrower's side of the lent backend, for tests: ``self.llm`` / ``self.embedder`` over the ``openai`` client.

:class:`OpenAIChat` is a ChatLLM whose ``chat`` sends every call through ``openai.OpenAI`` to a
:class:`~ctxbench.core.lent.LentBackend` (``max_new_tokens`` → ``max_tokens``, a schema →
``response_format`` json_schema, ``json_mode`` → json_object) and reads the reply back from the wire
(text, ``usage``, ``finish_reason``); a non-2xx answer is a failed call. It sends no phase: the lent server
takes it from the task the borrower runs. Everything else a system reads from its LLM (``meter``,
``count_tokens``, ``fitted`` ...) is the local backend ``like``'s. :func:`borrowing` makes a built-in
memory system a borrower: the same class, its ``llm`` and ``embedder`` swapped for these when it is lent
the backend, so a run of it makes the built-in's very calls, only over HTTP.

``received`` keeps everything the borrower received (the LentBackend, every response's headers and
body), for the test that the user's key never reaches it.
"""
from __future__ import annotations

import base64
from typing import Any

import httpx
import numpy as np
import openai

from ctxbench.llm.base import ChatResult


def client(lent: Any, received: list[str] | None = None) -> openai.OpenAI:
    hooks = {}
    if received is not None:
        received.append(repr(lent))

        def keep(response: httpx.Response) -> None:
            response.read()
            received.append(repr(dict(response.headers)) + response.text)

        hooks = {"response": [keep]}
    return openai.OpenAI(base_url=lent.base_url, api_key=lent.api_key, max_retries=0, timeout=60,
                         http_client=httpx.Client(event_hooks=hooks))


class OpenAIChat:
    def __init__(self, lent: Any, like: Any, received: list[str] | None = None):
        self.lent, self.like = lent, like
        self.client = client(lent, received)

    def __getattr__(self, name: str) -> Any:
        if name in ("like", "lent", "client"):
            raise AttributeError(name)
        return getattr(self.like, name)

    def chat(self, messages, *, max_new_tokens=64, temperature=0.0, phase="answer", json_mode=False, schema=None,
             seed=None, stop=None) -> ChatResult:
        kw: dict[str, Any] = {"model": self.lent.model, "messages": messages, "max_tokens": max_new_tokens,
                              "temperature": temperature}
        if schema is not None:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        elif json_mode:
            kw["response_format"] = {"type": "json_object"}
        if seed is not None:
            kw["seed"] = seed
        if stop:
            kw["stop"] = list(stop)
        try:
            resp = self.client.chat.completions.create(**kw)
        except openai.APIStatusError as e:
            return ChatResult("", 0, 0, failed=True, error=str(e))
        choice, own = resp.choices[0], (resp.model_extra or {}).get("ctxbench") or {}
        return ChatResult(choice.message.content or "", resp.usage.prompt_tokens, resp.usage.completion_tokens,
                          truncated=choice.finish_reason == "length", constrained=bool(own.get("constrained")),
                          cached=bool(own.get("cached")), token_source=str(own.get("token_source") or ""))

    def chat_batch(self, batch, **kw) -> list[ChatResult]:
        return [self.chat(m, **kw) for m in batch]


class OpenAIEmbedder:
    def __init__(self, lent: Any, dim: int, received: list[str] | None = None):
        self.lent, self.dim = lent, dim
        self.client = client(lent, received)

    def encode(self, texts) -> np.ndarray:
        resp = self.client.embeddings.create(model=self.lent.embedding_model, input=list(texts))
        rows = [d.embedding for d in resp.data]  # the client asks for base64 and decodes it
        if rows and isinstance(rows[0], str):
            rows = [np.frombuffer(base64.b64decode(r), dtype="<f4") for r in rows]
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dim)


def borrowing(cls: type, received: list[str] | None = None) -> type:
    """``cls`` (a built-in memory system) as a borrower making the same calls over the lent backend."""

    class Borrowing(cls):  # type: ignore[misc, valid-type]
        borrows_backend = True

        def use_backend(self, lent: Any) -> None:
            super().use_backend(lent)
            self.llm = OpenAIChat(lent, self.llm, received)
            if getattr(self, "call", None) is not None:  # MemorySystem's structured caller
                self.call.llm = self.llm
            if getattr(self, "embedder", None) is not None:
                self.embedder = OpenAIEmbedder(lent, self.embedder.dim, received)

    Borrowing.__name__ = Borrowing.__qualname__ = f"Borrowing{cls.__name__}"
    return Borrowing
