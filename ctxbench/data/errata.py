"""Published errata of a dataset's gold answers (``dataset.errata=FILE``) and the ceiling they set.

The file is the shape of dial481/locomo-audit's ``errors.json``: a JSON list of objects, one per
audited question, each with

- ``question_id``: ``locomo_<i>_qa<j>`` (locomo-audit: ``i`` = the conversation's position in the
  LoCoMo file, ``j`` = the question's position in its ``qa`` list, both from 0) or a ctxbench question
  id ``<sample_id>-q<j>``;
- ``golden_answer``: the dataset's gold answer as the errata's authors read it (string or integer);
- ``correct_answer``: the corrected answer;
- ``error_type``: the kind of error (locomo-audit: HALLUCINATION, TEMPORAL_ERROR, ATTRIBUTION_ERROR,
  AMBIGUOUS, INCOMPLETE, WRONG_CITATION);
- optional ``question`` (checked against the dataset's question text) and ``category``; other keys
  (``reasoning``, ``cited_evidence``, ``correct_evidence``) are not read.

Each row ends in one of these outcomes (counted in results.json ``corrected.errata``):

- ``applied``: under the corrected gold the question's answer is ``correct_answer``;
- ``citation_only``: ``error_type`` is one of :data:`CITATION_ONLY` (the answer is right, its evidence
  ids are not: locomo-audit's 57 WRONG_CITATION rows, whose ``correct_answer`` often carries a comment);
  the gold answer stands;
- ``unchanged``: ``correct_answer`` is ``golden_answer`` (after trimming spaces); the gold answer stands;
- ``mismatched``: ``golden_answer`` (or ``question``) is not the dataset's: the errata were written for
  another copy of the data; reported row by row, never applied;
- ``unknown``: no question of the dataset has that id; reported, never applied.

A gold answer is *marked wrong* when its row is applied. The ceiling is the score a system that is
always right would get under the original gold: 1 − marked / questions, over the categories the
errata audit (the dataset's categories of the questions its rows name): locomo-audit marks 99 of the
1,540 questions of categories 1–4, a ceiling of 93.57%.

A file that is not this shape is one :class:`~ctxbench.data.errors.DataError` naming the file, the row
and the field.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Iterable

from ctxbench.core.types import Question, Sample
from ctxbench.data.errors import DataError
from ctxbench.data.invariants import answer_text, nonblank
from ctxbench.data.records import field, read_json, short_text

#: Error kinds that say the evidence is wrong, not the answer: never applied, not in the ceiling.
CITATION_ONLY = frozenset({"WRONG_CITATION"})
AUDIT_ID = re.compile(r"locomo_(\d+)_qa(\d+)$")


@dataclass(frozen=True)
class ErrataRow:
    row: int
    question_id: str
    original: str
    corrected: str
    kind: str
    question: str | None = None


@dataclass(frozen=True)
class Correction:
    """The corrected gold of one question (``row``: its row in the errata file, from 0)."""

    answer: str
    original: str
    kind: str
    row: int


@dataclass
class Errata:
    """Errata resolved against a dataset: the corrections to apply and what was not applied.

    ``audited`` / ``marked``: per category name, the dataset's questions in the audited categories and
    those whose gold the errata mark wrong (the whole file, before any subsetting).
    """

    source: str
    rows: int
    corrections: dict[str, Correction] = dc_field(default_factory=dict)
    outcomes: Counter = dc_field(default_factory=Counter)
    mismatched: list[dict[str, Any]] = dc_field(default_factory=list)
    unknown: list[dict[str, Any]] = dc_field(default_factory=list)
    kinds: Counter = dc_field(default_factory=Counter)
    audited: dict[str, int] = dc_field(default_factory=dict)
    marked: dict[str, int] = dc_field(default_factory=dict)
    audited_ids: dict[str, Any] = dc_field(default_factory=dict)

    def ceiling(self) -> dict[str, Any]:
        """``{"n", "marked", "ceiling", "categories"}`` over the whole dataset's audited categories."""
        return ceiling_of(self.audited, self.marked, self.audited_ids)

    def summary(self) -> dict[str, Any]:
        """results.json ``corrected.errata``: the file, its row outcomes and the dataset-wide ceiling."""
        return {"file": self.source, "rows": self.rows,
                **{k: self.outcomes.get(k, 0) for k in ("applied", "citation_only", "unchanged", "mismatched",
                                                        "unknown")},
                "applied_by_kind": dict(sorted(Counter(c.kind for c in self.corrections.values()).items())),
                "citation_only_kinds": sorted(CITATION_ONLY),
                "mismatched_rows": self.mismatched, "unknown_rows": self.unknown,
                "dataset_ceiling": self.ceiling()}


def ceiling_of(n: dict[str, int], marked: dict[str, int], ids: dict[str, Any] | None = None) -> dict[str, Any]:
    """1 − marked / n overall (the categories in ``n``) and per category, rounded to 4 places."""
    total, wrong = sum(n.values()), sum(marked.get(c, 0) for c in n)
    cats = {c: {"id": (ids or {}).get(c), "n": n[c], "marked": marked.get(c, 0),
                "ceiling": round(1 - marked.get(c, 0) / n[c], 4) if n[c] else None} for c in n}
    return {"n": total, "marked": wrong, "ceiling": round(1 - wrong / total, 4) if total else None,
            "categories": cats}


def _text(rec: Any, name: str, path: Path, where: str) -> str:
    val = field(rec, name, (str, int, float), path, where)
    return nonblank(answer_text(val, path, where, name), path, where, name)


def read_errata(path: str | Path) -> list[ErrataRow]:
    """The rows of an errata file, each checked (one DataError naming the file, row and field)."""
    from ctxbench.data.paths import resolve

    p = resolve(path, what="dataset.errata", hint="dataset.errata= takes an errata JSON file (a list of "
                                                  "{question_id, golden_answer, correct_answer, error_type})")
    data = read_json(p)
    if not isinstance(data, list):
        raise DataError(p, f"expected a JSON list of errata rows, got {type(data).__name__}")
    rows, seen = [], {}
    for i, rec in enumerate(data):
        where = f"row {i}"
        qid = nonblank(field(rec, "question_id", str, p, where), p, where, "question_id").strip()
        if qid in seen:
            raise DataError(p, f"question_id {short_text(qid, 40)!r} already given in row {seen[qid]}",
                            record=where, field="question_id")
        seen[qid] = i
        question = field(rec, "question", str, p, where, default=None)
        rows.append(ErrataRow(i, qid, _text(rec, "golden_answer", p, where), _text(rec, "correct_answer", p, where),
                              nonblank(field(rec, "error_type", str, p, where), p, where, "error_type").strip(),
                              question))
    return rows


def _index(samples: Iterable[Sample]) -> tuple[dict[str, Question], list[Sample]]:
    listed = list(samples)
    return {q.id: q for s in listed for q in s.questions}, listed


def _question(row: ErrataRow, by_id: dict[str, Question], listed: list[Sample]) -> Question | None:
    m = AUDIT_ID.fullmatch(row.question_id)
    if m:
        i, j = int(m.group(1)), int(m.group(2))
        if i < len(listed):
            return by_id.get(f"{listed[i].history.id}-q{j}")
        return None
    return by_id.get(row.question_id)


def _same(a: str, b: str) -> bool:
    return a.strip() == b.strip()


def resolve_errata(rows: list[ErrataRow], samples: Iterable[Sample], source: str) -> Errata:
    """Match each row to the dataset's question (``samples``: the whole file, in file order) and sort it
    into an outcome; the gold answer compared is the question's ``answer`` (for LoCoMo's adversarial
    questions, whose gold is the 'not mentioned' option, the file's own answer in ``meta["raw_answer"]``
    or the distractor)."""
    from ctxbench.data.categories import question_category

    by_id, listed = _index(samples)
    out = Errata(source=source, rows=len(rows))
    cats: set[str] = set()
    for row in rows:
        q = _question(row, by_id, listed)
        if q is None:
            out.outcomes["unknown"] += 1
            out.unknown.append({"row": row.row, "question_id": row.question_id})
            continue
        cats.add(question_category(q))
        golds = [q.answer] + [g for g in (q.meta.get("raw_answer"), q.adversarial_answer) if g is not None]
        if row.question is not None and not _same(row.question, q.question):
            out.mismatched.append({"row": row.row, "question_id": row.question_id, "id": q.id, "field": "question",
                                   "errata": row.question, "dataset": q.question})
        elif not any(_same(row.original, str(g)) for g in golds):
            out.mismatched.append({"row": row.row, "question_id": row.question_id, "id": q.id,
                                   "field": "golden_answer", "errata": row.original, "dataset": q.answer})
        elif row.kind in CITATION_ONLY:
            out.outcomes["citation_only"] += 1
            continue
        elif _same(row.corrected, row.original):
            out.outcomes["unchanged"] += 1
            continue
        else:
            out.outcomes["applied"] += 1
            out.kinds[row.kind] += 1
            out.corrections[q.id] = Correction(row.corrected.strip(), row.original, row.kind, row.row)
            continue
        out.outcomes["mismatched"] += 1
    for q in by_id.values():
        name = question_category(q)
        if name in cats:
            out.audited[name] = out.audited.get(name, 0) + 1
            out.audited_ids.setdefault(name, q.category)
            if q.id in out.corrections:
                out.marked[name] = out.marked.get(name, 0) + 1
    order = sorted(out.audited, key=lambda c: str(out.audited_ids.get(c)))
    out.audited = {c: out.audited[c] for c in order}
    return out


def load_errata(path: str | Path, samples: Iterable[Sample]) -> Errata:
    """:func:`read_errata` then :func:`resolve_errata` against ``samples`` (the whole dataset, file order)."""
    return resolve_errata(read_errata(path), samples, str(path))


def mismatch_line(errata: Errata) -> str | None:
    """One line for the log when rows were not applied because they do not fit the dataset, else None."""
    bad = errata.outcomes.get("mismatched", 0) + errata.outcomes.get("unknown", 0)
    if not bad:
        return None
    first = (errata.mismatched or errata.unknown)[0]
    return (f"{errata.source}: {bad} of {errata.rows} errata rows do not fit the dataset and are not applied "
            f"({errata.outcomes.get('mismatched', 0)} with another gold answer or question, "
            f"{errata.outcomes.get('unknown', 0)} with an unknown question id; first: row {first['row']} "
            f"{first['question_id']}); results.json corrected.errata lists them")
