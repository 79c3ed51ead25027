"""The one way a history becomes text: :func:`render_history` (and the line/block helpers it uses).

Every system that shows a history to a model as text renders it here, so ``method=lm``,
``memory=full_context``, the KV-cache methods and any other prompt-based system see the same text
for the same history. Styles:

- ``locomo`` (the QA default): as the LoCoMo reference puts a conversation in its prompt,
  ``DATE: <date>\\nCONVERSATION:\\n<speaker> said, "<text>"\\n...`` then a blank line per session;
- ``plain``: ``DATE: <date>\\n<speaker>: <text>`` per session, sessions separated by a blank line
  (the training text of the compression methods).

A document (no sessions) renders as its text in every style. ``first_turn`` drops the oldest turns
(counted across sessions); a session left without turns is left out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxbench.core.types import History, Session

STYLES = ("locomo", "plain")


def render_turn(speaker: str, text: str) -> str:
    """One turn in the ``locomo`` style."""
    return f'{speaker} said, "{text}"\n'


def render_session_block(date: str, turn_lines: list[str]) -> str:
    """One session in the ``locomo`` style, from its already rendered turn lines."""
    return f"DATE: {date}\nCONVERSATION:\n" + "".join(turn_lines)


def render_session(session: "Session", with_date: bool = True, start_turn: int = 0) -> str:
    """One session in the ``plain`` style."""
    head = f"DATE: {session.date}\n" if with_date and session.date else ""
    return head + "\n".join(f"{t.speaker}: {t.text}" for t in session.turns[start_turn:])


def render_history(history: "History", style: str = "locomo", first_turn: int = 0, with_dates: bool = True) -> str:
    """``history`` as the text a model reads (see the module docstring for the styles)."""
    if style not in STYLES:
        raise ValueError(f"unknown history style {style!r}; styles are {', '.join(STYLES)}")
    if not history.sessions:
        return history.text
    parts: list[str] = []
    skip = max(0, int(first_turn))
    for s in history.sessions:
        start, skip = min(skip, len(s.turns)), max(0, skip - len(s.turns))
        if start >= len(s.turns):
            continue
        if style == "locomo":
            parts.append(render_session_block(s.date, [render_turn(t.speaker, t.text) for t in s.turns[start:]]) + "\n\n")
        else:
            parts.append(render_session(s, with_dates, start))
    return "".join(parts) if style == "locomo" else "\n\n".join(parts)
