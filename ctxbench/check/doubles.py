"""What ``check`` runs a system on instead of a model: the bench's scripted chat model, a word-hash
embedder, and the two ways a run is stopped midway.

:class:`CheckLLM` is :class:`ctxbench.bench.scripted_llm.ScriptedChatModel` (a small valid reply for
every prompt a built-in memory system sends, from the ``SCRIPTED`` tables beside its prompts) that
also takes the ``SCRIPTED`` table of a plug-in's own prompts module, answers one call at a time with an
optional delay (so calls of several workers overlap), keeps what it was sent, and can stop the run at
a given call: by raising :class:`Interrupted` (in-process) or by ``kill -9`` of its own process.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time
import zlib
from typing import Any, Callable

import numpy as np

from ctxbench.bench.scripted_llm import ScriptedChatModel


class Interrupted(BaseException):
    """The run stopped here on purpose (a BaseException, as KeyboardInterrupt: no ``except Exception`` eats it)."""


class CheckLLM(ScriptedChatModel):
    """The scripted chat model ``check`` runs systems on (see the module doc).

    ``stop_at``: (phase, n) — the n-th call (1-based) of that phase raises :class:`Interrupted`
    (``kill=True``: the process kills itself with SIGKILL there instead). ``sent``: (question id or "",
    phase, every message's text) of each call, the question being the one :attr:`asking` names."""

    def __init__(self, scripted: dict[str, Callable[[str], str]] | None = None, delay: float = 0.0,
                 stop_at: tuple[str, int] | None = None, kill: bool = False) -> None:
        super().__init__()
        for key, fn in (scripted or {}).items():
            self._routes[key] = (f"plugin.{re.sub(r'[^a-z0-9]+', '_', key[:24].lower()).strip('_')}", fn)
        self.delay = float(delay)
        self.stop_at, self.kill = stop_at, kill
        self.sent: list[tuple[str, str, str]] = []
        self.asking = threading.local()
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}

    def reply(self, messages: list[dict[str, str]], phase: str) -> str:
        if self.delay:
            time.sleep(self.delay)  # outside the lock: the calls of several workers overlap
        with self._lock:
            n = self._calls[phase] = self._calls.get(phase, 0) + 1
            if self.stop_at is not None and self.stop_at == (phase, n):
                if self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise Interrupted(f"stopped at {phase} call {n}")
            self.sent.append((getattr(self.asking, "qid", ""), phase, "\n".join(str(m.get("content", ""))
                                                                              for m in messages)))
            return super().reply(messages, phase)


class WordHashEmbedder:
    """Lowercase words hashed into a normalised 256-d vector: texts that share words are close (no model)."""

    dim = 256
    model_name = "word-hash"

    def encode(self, texts: Any) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", str(text).lower()):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
            norm = np.linalg.norm(out[i])
            if norm:
                out[i] /= norm
        return out


def scripted_replies(cls: type) -> dict[str, Callable[[str], str]]:
    """A plug-in's scripted replies: ``SCRIPTED`` of the module that defines ``cls``, of its package, and of
    its package's ``prompts`` module (the layout ``ctxbench new memory`` writes), merged."""
    import importlib
    import sys

    found: dict[str, Callable[[str], str]] = {}
    module = cls.__module__
    names = [module, module.rpartition(".")[0], (module.rpartition(".")[0] or module) + ".prompts"]
    for name in dict.fromkeys(n for n in names if n and not n.startswith("ctxbench.")):
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = importlib.import_module(name)
            except ImportError:
                continue
        table = getattr(mod, "SCRIPTED", None)
        if isinstance(table, dict):
            found.update(table)
    return found
