"""What a system that only speaks OpenAI is lent for the length of a run: the address of ctxbench's own backend.

A system whose class sets ``borrows_backend = True`` (a plug-in wrapping a library, ``memory=http``) is
handed a :class:`LentBackend` with :meth:`ctxbench.core.system.System.use_backend` before its first
``ingest``. Its ``base_url`` serves ``/v1/chat/completions``, ``/v1/embeddings`` and ``/v1/models``
(OpenAI-compatible) on 127.0.0.1 with the run's own LLM backend and embedder, so every call the borrower
makes goes through the same model, call cache, token counting (per phase), failure accounting and
secrets handling as a built-in system's. ``api_key`` is a token that works only on that endpoint and
only for that system instance: the key of the user's own server (``llm=openai``) never leaves ctxbench.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LentBackend:
    base_url: str  # "http://127.0.0.1:PORT/v1": what an OpenAI client takes as base_url
    api_key: str  # a token valid only on that endpoint, only for the instance it was handed to
    model: str  # the chat model name to send in requests (the run's llm)
    embedding_model: str | None = None  # the embedder's name for /v1/embeddings; None: the run has no embedder
