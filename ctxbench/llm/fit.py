"""Fitting an over-long prompt into the window without losing its instructions.

Systems size their prompts to the window; this is the backends' last guard. It keeps the system
message whole and cuts the *middle* of the longest other message (its head usually holds the
instructions, its tail the new messages or the question), marking the cut with ``[…]``. Only
when that cannot make room (the system message alone is too long) do backends fall back to
dropping the oldest tokens, and they count that call as truncated.

Each backend that fits exposes ``fitted(messages, max_new_tokens)`` (the messages as it sends them);
:func:`held_text_tokens` reads it so that a system counts the history text the model actually got.
"""
from __future__ import annotations

from typing import Any, Callable

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


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def kept_pieces(text: str, message: str, sent: str) -> list[str]:
    """The pieces of ``text`` (a part of ``message``) still in ``sent``, ``message`` as :func:`fit_messages`
    left it (its head and tail kept, its middle cut): the whole ``text`` when nothing was cut."""
    start = message.find(text)
    if not text or start < 0 or sent == message:
        return [text] if text else []
    end = start + len(text)
    head = _common_prefix(message, sent)
    tail = min(_common_prefix(message[::-1], sent[::-1]), max(0, len(sent) - head))
    pieces = [message[start:min(end, head)], message[max(start, len(message) - tail):end]]
    return [p for p in pieces if p]


def held_text_tokens(llm: Any, messages: list[Message], text: str, max_new_tokens: int) -> int:
    """Tokens of ``text`` (history or memory text inside one of ``messages``) that the answering model
    gets once ``llm`` fits the messages into its window: the backend's own ``fitted`` (the messages as it
    sends them; a backend without one never cuts), counted with its ``count_tokens``. The backends' last
    guard past that (dropping the oldest tokens when the system message alone is too long) is not seen."""
    if not text:
        return 0
    fitted = getattr(llm, "fitted", None)
    sent = fitted(messages, max_new_tokens) if fitted is not None else messages
    for m, s in zip(messages, sent):
        content = m.get("content", "")
        if text in content:
            return sum(llm.count_tokens(p) for p in kept_pieces(text, content, s.get("content", "")))
    return llm.count_tokens(text)
