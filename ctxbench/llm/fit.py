"""Fitting an over-long prompt into the window without losing its instructions.

Systems size their prompts to the window; this is the backends' last guard. It keeps the system
message whole and cuts the *middle* of the longest other message (its head usually holds the
instructions, its tail the new messages or the question), marking the cut with ``[…]``. Only
when that cannot make room (the system message alone is too long) do backends fall back to
dropping the oldest tokens, and they count that call as truncated.
"""
from __future__ import annotations

from typing import Callable

from ctxbench.llm.base import Message

MARK = "\n[…]\n"
MIN_KEEP_CHARS = 32  # a message is never cut below this (head + tail)


def cut_middle(text: str, drop_chars: int) -> str:
    """``text`` without ``drop_chars`` characters from its middle (head and tail kept equally)."""
    keep = max(MIN_KEEP_CHARS, len(text) - max(0, drop_chars) - len(MARK))
    if keep >= len(text):
        return text
    head = (keep + 1) // 2
    return text[:head] + MARK + text[len(text) - (keep - head):]


def fit_messages(messages: list[Message], budget: int, measure: Callable[[list[Message]], int],
                 count: Callable[[str], int]) -> tuple[list[Message], bool]:
    """(messages that fit in ``budget`` tokens as ``measure`` counts them, whether any was cut).

    ``count`` counts the tokens of one text (to turn a token overflow into characters). Returns
    the best effort when nothing more can be cut (the caller's last guard decides).
    """
    msgs = [dict(m) for m in messages]
    cut = False
    for _ in range(8):
        over = measure(msgs) - budget
        if over <= 0:
            return msgs, cut
        others = [i for i, m in enumerate(msgs) if m.get("role") != "system"] or list(range(len(msgs)))
        i = max(others, key=lambda j: len(msgs[j].get("content", "")))
        content = msgs[i].get("content", "")
        if len(content) <= MIN_KEEP_CHARS + len(MARK):
            break
        per_token = len(content) / max(1, count(content))
        shorter = cut_middle(content, int((over + 4) * per_token * 1.1) + 1)
        if shorter == content:
            break
        msgs[i]["content"] = shorter
        cut = True
    return msgs, cut
