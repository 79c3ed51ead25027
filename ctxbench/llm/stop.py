"""Stop strings: a call may end its reply at the first of some strings (``chat(..., stop=[...])``).

An answer prompt that keeps only the reply's first line (``qa_prompt=brief``) declares
``stop=("\\n",)`` (:attr:`ctxbench.qa.prompt.AnswerPrompt.stop`): the backend stops generating at the
first line break instead of running to ``max_new_tokens``, and the reply is the text before it.

The rule, the same in every backend (``llm=hf``, the scripted test doubles, and ``llm=openai``'s
reply after the server applied the ``stop`` it was sent): a stop string ends the reply only where it
starts after the reply's first non-whitespace character, so leading blank lines never make an
empty reply. The reply is the text before the stop string (the stop string itself is dropped); a
reply that ended so is marked ``ChatResult.stopped`` (not ``truncated``). For a prompt whose
post-processing keeps the first non-empty line, the post-processed answer is therefore the same
with or without the stop (tests/test_llm_stop.py).
"""
from __future__ import annotations

from typing import Any, Sequence


def stop_list(stop: Any) -> list[str]:
    """``stop`` as a list of non-empty strings (None, a string, or a sequence of strings); ``[]``: none."""
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) for s in items):
        raise TypeError(f"stop: expected strings, got {stop!r}")
    return [s for s in items if s]


def find_stop(text: str, stop: Sequence[str]) -> int | None:
    """Where the reply ends: the index of the earliest stop string starting after ``text``'s first
    non-whitespace character, or None when no stop string ends it (see the module doc)."""
    if not stop:
        return None
    start = len(text) - len(text.lstrip())
    if start == len(text):  # only whitespace so far: nothing can end it yet
        return None
    hits = [i for i in (text.find(s, start + 1) for s in stop) if i >= 0]
    return min(hits) if hits else None


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """(``text`` cut before its stop string, whether one was found)."""
    i = find_stop(text, stop)
    return (text, False) if i is None else (text[:i], True)
