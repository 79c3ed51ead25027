"""What every loaded dataset guarantees, checked in one place at the end of each loader.

:func:`check_samples` is the boundary between an untrusted file and the evaluator: a dataset that
passes it has

- at least one sample, each with a non-empty, unique history id;
- for a conversational dataset (LoCoMo, DialSim) at least one session per history and at least
  one turn with non-empty text; for a document dataset (PwC) non-empty text;
- questions where the dataset has them (``questions="each"``: every sample; ``"any"``: at least
  one in the dataset), each with a non-empty unique id, non-empty question text, a non-empty
  string answer (LoCoMo's category-5 items get the adversarial gold, see :mod:`.locomo`) and a
  category in the dataset's set.

A violation is a :class:`DataError` naming the file, the record and the field. :func:`answer_text`
is the one conversion of a raw answer to text: strings as they are, integers (LoCoMo writes years
as ``2022``) and finite numbers as their decimal text; NaN and infinities are refused, never
turned into the gold answers "nan" / "inf".
"""
from __future__ import annotations

import math
from typing import Any, Collection, Iterable

from ctxbench.core.types import Question, Sample
from ctxbench.data.errors import DataError
from ctxbench.data.records import short_repr, short_text

QUESTION_RULES = ("each", "any", "none")


def answer_text(val: Any, path: object, record: object, field: str) -> str:
    """A raw answer (str, int or finite float) as text; NaN/Infinity are a DataError."""
    if isinstance(val, float) and not math.isfinite(val):
        raise DataError(path, f"{val!r} is not an answer; write the answer as a string", record=record, field=field)
    return val if isinstance(val, str) else str(val)


def nonblank(val: str, path: object, record: object, field: str) -> str:
    """``val`` if it has a non-space character, else a DataError (an empty text cannot be scored)."""
    if not val.strip():
        raise DataError(path, f"is empty ({short_repr(val)}); a non-empty string is required", record=record,
                        field=field)
    return val


def _check_history(s: Sample, path: object, conversational: bool) -> None:
    h, rec = s.history, short_text(s.history.id, 60)
    if conversational:
        if not h.sessions:
            raise DataError(path, "has no sessions; a conversation needs at least one", record=rec, field="sessions")
        if not any(t.text.strip() for sess in h.sessions for t in sess.turns):
            raise DataError(path, "has no turn with text; a conversation needs at least one", record=rec,
                            field="sessions")
    elif not h.text.strip():
        raise DataError(path, "has an empty context text", record=rec, field="text")


def _check_question(q: Question, path: object, categories: Collection[Any] | None) -> None:
    rec = short_text(q.id, 60) if q.id else "(question without id)"
    if not isinstance(q.id, str) or not q.id.strip():
        raise DataError(path, "question has an empty id", record=rec, field="id")
    for name in ("question", "answer"):
        val = getattr(q, name)
        if not isinstance(val, str):
            raise DataError(path, f"must be a string, got {type(val).__name__}", record=rec, field=name)
        nonblank(val, path, rec, name)
    if categories is not None and q.category not in categories:
        raise DataError(path, f"category {short_repr(q.category)} is not one of {sorted(map(str, categories))}", record=rec,
                        field="category")
    if categories is None and (isinstance(q.category, bool) or not isinstance(q.category, (int, str))
                               or q.category == ""):
        raise DataError(path, f"category must be a non-empty name or an integer, got {short_repr(q.category)}", record=rec,
                        field="category")


def check_samples(samples: Iterable[Sample], path: object, *, conversational: bool,
                  categories: Collection[Any] | None = None, questions: str = "each") -> None:
    """Raise a DataError naming ``path``, the record and the field if ``samples`` break an invariant."""
    if questions not in QUESTION_RULES:
        raise ValueError(f"questions must be one of {QUESTION_RULES}, got {questions!r}")
    samples = list(samples)
    if not samples:
        raise DataError(path, "holds no samples")
    seen_h: set[str] = set()
    seen_q: set[str] = set()
    n_questions = 0
    for s in samples:
        hid = s.history.id
        if not isinstance(hid, str) or not hid.strip():
            raise DataError(path, "sample has an empty id", record=short_repr(hid), field="id")
        if hid in seen_h:
            raise DataError(path, "duplicate sample id", record=short_text(hid, 60), field="id")
        seen_h.add(hid)
        _check_history(s, path, conversational)
        if questions == "each" and not s.questions:
            raise DataError(path, "has no questions", record=hid, field="questions")
        for q in s.questions:
            _check_question(q, path, categories)
            if q.id in seen_q:
                raise DataError(path, "duplicate question id", record=short_text(q.id, 60), field="id")
            seen_q.add(q.id)
        n_questions += len(s.questions)
    if questions == "any" and not n_questions:
        raise DataError(path, "holds no questions")
