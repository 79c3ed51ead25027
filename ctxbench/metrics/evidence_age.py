"""Results grouped by the age of each question's evidence: how a memory decays over a conversation.

Compress once, query many: a system ingests a whole conversation (session by session, never seeing
the questions), then every question is asked at the end. A question's evidence is a list of LoCoMo
dia_ids ``D<session>:<turn>`` (:attr:`ctxbench.core.types.Question.evidence`); its **age** is

    (the history's last session) - (the session of its most recent evidence), in sessions,

so 0 = said in the last session, 3 = three sessions before it. The history's last session is the
highest session number among its turns' dia_ids (the same numbering as the evidence), written into
each prediction record as ``history_last_session`` when the question is answered
(:func:`history_last_session`); ``score predictions=FILE`` groups a file whose lines carry
``evidence`` and ``history_last_session`` the same way. Ages fall into the buckets of
:data:`BUCKETS`; a question with no evidence id naming a session of its history (none, malformed, or
a record without ``history_last_session``) goes to ``unknown``. A history without that numbering
(LongMemEval: evidence = ``answer_session_ids``) has its age written into each record as ``evidence_age``
(:func:`session_evidence_age`: sessions after the latest evidence session, in the history's time order). Each bucket is one results.json row
as ``by_category``'s are (n, each metric's mean, its bootstrap stderr: :func:`.aggregate.group_means`),
and failed answers count 0 there as in the headline numbers.
"""
from __future__ import annotations

from typing import Any, Iterable

from ctxbench.core.types import History
from ctxbench.data.locomo import parse_evidence_id
from ctxbench.metrics.aggregate import group_means

#: (label, lowest age, highest age or None) in sessions ago, in results.json order
BUCKETS: tuple[tuple[str, int, int | None], ...] = (("0", 0, 0), ("1", 1, 1), ("2-3", 2, 3), ("4-7", 4, 7),
                                                    ("8+", 8, None))
UNKNOWN = "unknown"
AGE = "evidence_age"  # a record's age given directly (histories without LoCoMo numbering: LongMemEval)
LAST_SESSION = "history_last_session"  # the predictions.jsonl field :func:`history_last_session` fills
DEFINITION = ("age = (the history's last session) - (the session of the question's most recent evidence), "
              "in sessions; unknown = no evidence id in a session of the history")


def history_last_session(history: History) -> int | None:
    """The highest session number among the history's turn ids (``D<session>:<turn>``); None for a
    document history or one whose turns carry no such ids (its questions' ages are unknown)."""
    sessions = [s for sess in history.sessions for t in sess.turns for s, _ in parse_evidence_id(t.id or "")]
    return max(sessions) if sessions else None


def evidence_age(evidence: Iterable[str] | None, last_session: int | None) -> int | None:
    """Sessions between the history's last session and the question's most recent evidence; None when
    no evidence id names a session 1..``last_session`` (or the last session is unknown)."""
    if last_session is None:
        return None
    sessions = [s for e in evidence or () for s, _ in parse_evidence_id(str(e)) if 1 <= s <= int(last_session)]
    return int(last_session) - max(sessions) if sessions else None


def session_evidence_age(session_order: list[str], evidence_sessions: Iterable[str]) -> int | None:
    """Sessions after the latest evidence session, the sessions in time order (LongMemEval: ``answer_session_ids``
    placed in the haystack); None when no evidence session is in the history."""
    at = {sid: i for i, sid in enumerate(session_order)}
    where = [at[s] for s in evidence_sessions if s in at]
    return len(session_order) - 1 - max(where) if where else None


def age_bucket(age: int | None) -> str:
    """The :data:`BUCKETS` label of an age (``unknown`` for None)."""
    if age is None:
        return UNKNOWN
    return next(label for label, low, high in BUCKETS if age >= low and (high is None or age <= high))


def record_bucket(record: dict[str, Any]) -> str:
    """The bucket of a prediction record (its ``evidence_age``, else its ``evidence`` and ``history_last_session``)."""
    if isinstance(record.get(AGE), int):
        return age_bucket(record[AGE])
    last = record.get(LAST_SESSION)
    return age_bucket(evidence_age(record.get("evidence"), last if isinstance(last, int) else None))


def by_evidence_age(records: list[dict[str, Any]], names: list[str]) -> dict[str, Any] | None:
    """results.json ``by_evidence_age``: bucket → {ages, n, <metric>, <metric>_stderr, ...} in
    :data:`BUCKETS` order, then ``unknown``; only the buckets some question falls in. None when no
    record carries evidence (a dataset without session evidence: RULER, PwC)."""
    if not any(r.get("evidence") or r.get("evidence_sessions") for r in records):
        return None
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(record_bucket(r), []).append(r)
    order = [label for label, _, _ in BUCKETS] + [UNKNOWN]
    return {label: {"ages": _ages(label), **group_means(groups[label], names)} for label in order if label in groups}


def _ages(label: str) -> list[int | None] | None:
    """[lowest, highest] sessions ago of a bucket (highest None: no upper end); None for ``unknown``."""
    return next(([low, high] for lab, low, high in BUCKETS if lab == label), None)


def bucket_labels() -> list[str]:
    """Every bucket label in order, ``unknown`` last (report columns)."""
    return [label for label, _, _ in BUCKETS] + [UNKNOWN]
