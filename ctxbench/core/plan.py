"""What a system says it will do before it runs: the calls and embeddings of ``eval estimate=true``.

A system plans a history with ``estimate_calls(history, questions)`` (next to its own ``steps()`` /
``apply()`` / ``answer()``), yielding :class:`PlannedCall` and :class:`PlannedEmbed` items built with
the SAME prompt-rendering functions it calls when it runs. It counts with ``self.llm``, which during
an estimate is a tokenizer-only stand-in (``ctxbench/evaluation/estimate.py``: it counts a prompt as the
backend would after fitting it to the window, and refuses to generate). :func:`planned` turns one
prompt into a PlannedCall; its ``key`` is what the call cache keys on (messages and the cap), so
identical prompts anywhere in the run (one session's summary asked for in two haystacks) are seen.

``exact`` says whether the prompt is a pure function of the history (its tokens are exact) or holds
model output and is estimated by a rule the system states in ``note``; output tokens are always the
call's cap (an upper bound).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ctxbench.core.errors import CtxbenchError


@dataclass(frozen=True)
class PlannedCall:
    """One LLM call the run will make: its phase, prompt tokens, output-token cap and prompt key."""

    phase: str  # construction | answer | judge
    prompt_tokens: int
    max_new_tokens: int
    key: str | None = None  # identical prompts share it (the call cache serves all but the first); None: unique
    exact: bool = True  # the prompt is a pure function of the history; else estimated by ``note``'s rule
    kind: str = ""  # e.g. rag.summary, amem.note
    note: str = ""  # the rule an inexact prompt was estimated with


@dataclass(frozen=True)
class PlannedEmbed:
    """Texts the run will embed: ``texts`` known in advance (deduplicated by the shared embedder's
    cache), plus ``unknown`` texts that hold model output (each counted as computed)."""

    texts: tuple[str, ...] = ()
    unknown: int = 0
    kind: str = ""


class CannotEstimate(CtxbenchError):
    """A system that cannot say what it will do; the message names it and why (one line: the CLI prints
    it as an error line when it is not caught into estimate.json's ``cannot_estimate``)."""


def prompt_key(messages: list[dict[str, str]], max_new_tokens: int, schema: Any = None) -> str:
    """The identity of one prompt as the call cache sees it (messages, cap, schema)."""
    payload = json.dumps({"m": messages, "n": int(max_new_tokens), "s": schema}, sort_keys=True, ensure_ascii=False,
                         default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def planned(llm: Any, phase: str, messages: list[dict[str, str]], max_new_tokens: int, kind: str, *,
            schema: Any = None, exact: bool = True, note: str = "", extra_tokens: int = 0) -> PlannedCall:
    """``messages`` as one planned call, counted by ``llm.prompt_tokens`` (the estimate's stand-in:
    what the backend would count after fitting); ``extra_tokens`` adds the tokens of text a rule
    stands for (model output not known in advance)."""
    tokens = int(llm.prompt_tokens(messages, int(max_new_tokens))) + int(extra_tokens)
    window = getattr(llm, "context_window", None)
    if isinstance(window, int) and extra_tokens:  # the backend fits what a rule adds, too
        tokens = min(tokens, max(1, window - int(max_new_tokens)))
    return PlannedCall(phase, tokens, int(max_new_tokens), prompt_key(messages, max_new_tokens, schema) if exact else None,
                       exact, kind, note)


# Model output that a later prompt shows (a summary, a note's context, a fact) is not known before the
# run: it is assumed to take this share of its call's output cap (stated in the estimate's notes).
OUTPUT_SHARE = 0.5
