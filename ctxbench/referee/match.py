"""Each artifact row to its LoCoMo question: the conversation the row's key names (its index in the
LoCoMo file) and the normalised question text (Unicode NFKC, case-folded, curly quotes straightened,
every run of non-alphanumeric characters one space).

A question asked twice in one conversation (12 in locomo10.json) is settled deterministically: a row
that names its question index (EverMemOS ``qa<J>``) takes that question when the text agrees; otherwise
the k-th such row of the conversation, in artifact order, takes the k-th such LoCoMo question, in
LoCoMo order. Each settled case is listed (``ambiguous``). A row with no question of that text, a
conversation index the file does not have, or a question already taken is ``unmatched`` with its
location and reason; LoCoMo questions no row took are ``missing``. Nothing is dropped silently.

A format whose rows name the dataset's own question ids (LongMemEval's ``question_id``) is matched by
:func:`match_by_id` instead: the same three lists, an id the dataset file does not have (or one an
earlier row took) ``unmatched`` with its reason.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ctxbench.core.types import Question, Sample
from ctxbench.referee.rows import ArtifactRow

_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)
_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})
AMBIGUITY_RULE = ("same question text twice in a conversation: the row's own question index when it names "
                  "one, else the k-th row in artifact order takes the k-th LoCoMo question in LoCoMo order")


def normalise_question(text: str) -> str:
    s = unicodedata.normalize("NFKC", str(text)).translate(_QUOTES).casefold()
    return " ".join(_NON_ALNUM.sub(" ", s).split())


@dataclass
class Matched:
    row: ArtifactRow
    question: Question
    conversation: str


@dataclass
class MatchResult:
    matched: list[Matched] = field(default_factory=list)
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    ambiguous: list[dict[str, Any]] = field(default_factory=list)
    missing: list[Question] = field(default_factory=list)


def match_rows(rows: list[ArtifactRow], conversations: list[Sample]) -> MatchResult:
    """``conversations``: every conversation of the LoCoMo file, in file order."""
    res = MatchResult()
    index: list[dict[str, list[Question]]] = []
    for s in conversations:
        by_text: dict[str, list[Question]] = {}
        for q in s.questions:
            by_text.setdefault(normalise_question(q.question), []).append(q)
        index.append(by_text)
    taken: set[str] = set()
    for row in rows:
        if not 0 <= row.conv_index < len(conversations):
            res.unmatched.append(_unmatched(row, f"conversation index {row.conv_index} is not in the LoCoMo file "
                                                 f"({len(conversations)} conversations)"))
            continue
        sample = conversations[row.conv_index]
        cands = index[row.conv_index].get(normalise_question(row.question), [])
        free = [q for q in cands if q.id not in taken]
        if not cands:
            res.unmatched.append(_unmatched(row, f"no question of this text in {sample.history.id}"))
            continue
        if not free:
            res.unmatched.append(_unmatched(row, f"question already matched by an earlier row ({cands[0].id})"))
            continue
        q = free[0]
        if row.qa_index is not None:
            named = [c for c in free if c.meta.get("index") == row.qa_index]
            q = named[0] if named else q
        if len(cands) > 1:
            res.ambiguous.append({"location": row.location, "question": row.question, "matched": q.id,
                                  "candidates": [c.id for c in cands]})
        taken.add(q.id)
        res.matched.append(Matched(row, q, sample.history.id))
    res.missing = [q for s in conversations for q in s.questions if q.id not in taken]
    return res


def _unmatched(row: ArtifactRow, reason: str) -> dict[str, Any]:
    return {"location": row.location, "question": row.question, "reason": reason}


def match_by_id(rows: list[ArtifactRow], samples: list[Sample]) -> MatchResult:
    """Each row to the question whose id it names (``row.question_id``); ``samples``: every sample of the
    dataset file (LongMemEval: one per question, its history the question's own haystack)."""
    res = MatchResult()
    by_id = {q.id: (q, s.history.id) for s in samples for q in s.questions}
    taken: set[str] = set()
    for row in rows:
        qid = row.question_id
        if qid not in by_id:
            res.unmatched.append(_unmatched(row, f"question_id {qid!r} is not in the dataset file "
                                                 f"({len(by_id)} questions)"))
            continue
        if qid in taken:
            res.unmatched.append(_unmatched(row, f"question already matched by an earlier row ({qid})"))
            continue
        taken.add(qid)
        q, history = by_id[qid]
        res.matched.append(Matched(row, q, history))
    res.missing = [q for s in samples for q in s.questions if q.id not in taken]
    return res
