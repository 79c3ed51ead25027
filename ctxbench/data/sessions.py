"""Which sessions repeat across histories: the one definition ``data stats``, ``estimate=true`` and a run's
``reuse`` block share.

A session's identity across histories (:func:`session_key`) is its id and its turns (speaker and text),
not its date: LongMemEval's sampler draws each haystack's filler sessions from one pool and dates every
slot anew per question (``data/custom_history/sample_haystack_and_timestamp.py``), so the same session
carries another date in each haystack it is in; LoCoMo's ``session_1`` of two conversations shares an id
but not its turns, so the id alone is not enough either. :func:`dated_session_key` adds the date: work
whose input shows the date (a chunk text with its ``[date]`` head, a summary prompt that names the day)
is a pure function of the dated session, not of the session.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from ctxbench.core.types import History, Sample, Session


def _digest(payload: Any) -> str:
    return hashlib.sha1(json.dumps(payload, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def session_key(session: Session) -> str:
    """A session's identity across histories: its id and its turns (speaker, text); the date left out."""
    return f"{session.id}:{_digest([[t.speaker, t.text] for t in session.turns])}"


def dated_session_key(session: Session) -> str:
    """:func:`session_key` with the session's date: the same session on the same date."""
    return f"{session_key(session)}@{session.date or ''}"


def distinct_sessions(samples: Iterable[Sample | History]) -> dict[str, Any]:
    """How much of the histories repeats: histories, session slots (sessions over all histories), distinct
    sessions (:func:`session_key`), distinct dated sessions (:func:`dated_session_key`), turn slots and
    distinct turns (turns of the distinct sessions), and the share of slots that repeat an earlier one.
    ``samples``: samples or their histories."""
    histories = slots = turn_slots = turns = 0
    keys: set[str] = set()
    dated: set[str] = set()
    for s in samples:
        histories += 1
        for sess in getattr(s, "history", s).sessions:
            slots += 1
            turn_slots += len(sess.turns)
            key = session_key(sess)
            dated.add(f"{key}@{sess.date or ''}")
            if key not in keys:
                keys.add(key)
                turns += len(sess.turns)
    return {"histories": histories, "session_slots": slots, "distinct_sessions": len(keys),
            "distinct_dated_sessions": len(dated), "turn_slots": turn_slots, "distinct_turns": turns,
            "repeated_session_share": round(1 - len(keys) / slots, 4) if slots else 0.0}
