"""Test doubles for memory-system tests: a scripted ChatLLM and a bag-of-words embedder.

``ScriptedLLM(responder)`` answers every chat with ``responder(messages, phase)`` (a string), counts
tokens as whitespace words in the backend's :class:`UsageMeter`, and keeps every call in ``calls``.
``BowEmbedder`` hashes lowercase words into a normalised vector, so texts sharing words are close
and the true top-k is computable by hand.
"""
from __future__ import annotations

import re
import zlib
from typing import Callable

import numpy as np

from ctxbench.llm.base import ChatResult, UsageMeter
from ctxbench.llm.stop import apply_stop


class ScriptedLLM:
    model_name = "scripted"

    def __init__(self, responder: Callable[[list[dict], str], str]) -> None:
        self.responder = responder
        self.meter = UsageMeter()
        self.calls: list[tuple[str, list[dict]]] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    @property
    def context_window(self) -> int:
        return 8192

    def chat(self, messages, *, max_new_tokens=64, temperature=0.0, phase="answer", json_mode=False, schema=None,
             stop=None):
        self.calls.append((phase, messages))
        text, stopped = apply_stop(self.responder(messages, phase), stop or [])  # the backends' stop rule
        r = ChatResult(text, sum(self.count_tokens(m["content"]) for m in messages), self.count_tokens(text),
                       stopped=stopped)
        self.meter.add(phase, r)
        return r


def prompt_text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages)


class BowEmbedder:
    dim = 256

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
            n = np.linalg.norm(out[i])
            if n:
                out[i] /= n
        return out
