"""The predictions file ``score`` reads: one JSON object a line, checked at the boundary.

Each line is ``{id, prediction, answer, category, [category_name, adversarial_answer, ...]}``, as
``python -m ctxbench eval`` writes it. Accepted, strictly (gold answers are strings once a dataset
is loaded, so a predictions file is held to the same):

- ``id``: a non-empty string or an integer, unique in the file (a duplicate names both lines);
- ``prediction``: a string (may be empty: the system answered nothing) or an integer;
- ``answer``: a non-empty string or an integer (LoCoMo writes years as ``2022``), which becomes its
  decimal text; it may be left out only on an adversarial line (category 5 / ``adversarial``) that
  has ``adversarial_answer``; null, lists, objects, booleans and floats are refused;
- ``category``: an integer id or a non-empty name; ``adversarial_answer``, when present, a string;
- blank lines are skipped; NaN/Infinity, non-UTF-8 bytes (the byte offset is named), a torn or
  malformed line and a file with no lines are refused (:func:`ctxbench.data.records.iter_jsonl`).

Every refusal is a :class:`DataError` naming the file, the line and the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.data.categories import canonical_name
from ctxbench.data.bounds import MAX_ANSWER_CHARS, WHERE
from ctxbench.data.errors import DataError
from ctxbench.data.records import iter_jsonl, short_repr

REQUIRED = ("id", "prediction", "answer", "category")


def _is_int(val: Any) -> bool:
    return isinstance(val, int) and not isinstance(val, bool)


def _text(rec: dict[str, Any], key: str, path: Path, where: str, empty_ok: bool) -> str:
    """``rec[key]`` as text: a string (non-empty unless ``empty_ok``) or an integer."""
    val = rec[key]
    if _is_int(val):
        return str(val)
    if not isinstance(val, str):
        raise DataError(path, f"must be a string, got {type(val).__name__} ({short_repr(val)})", record=where,
                        field=key)
    if len(val) > MAX_ANSWER_CHARS:
        raise DataError(path, f"is {len(val)} characters long, over the {MAX_ANSWER_CHARS}-character limit for an "
                              f"answer {WHERE}", record=where, field=key)
    if not empty_ok and not val.strip():
        raise DataError(path, f"is empty ({short_repr(val)}); a non-empty string is required", record=where,
                        field=key)
    return val


def _is_adversarial(rec: dict[str, Any]) -> bool:
    name = rec.get("category_name")
    return "adversarial_answer" in rec and (
        (isinstance(name, str) and canonical_name(name) == "adversarial") or str(rec.get("category")) == "5")


def check_record(rec: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """One line's record, validated; ``prediction`` (and ``answer``) normalised to text."""
    for key in REQUIRED:
        if key not in rec and not (key == "answer" and _is_adversarial(rec)):
            raise DataError(path, "missing required field", record=where, field=key)
    rid = rec["id"]
    if not (_is_int(rid) or (isinstance(rid, str) and rid.strip())):
        raise DataError(path, f"must be a non-empty string or an integer, got {short_repr(rid)}", record=where,
                        field="id")
    rec["prediction"] = _text(rec, "prediction", path, where, empty_ok=True)
    if "answer" in rec:
        rec["answer"] = _text(rec, "answer", path, where, empty_ok=False)
    cat = rec["category"]
    if not (_is_int(cat) or (isinstance(cat, str) and cat.strip())):
        raise DataError(path, f"must be an integer id or a name, got {short_repr(cat)}", record=where,
                        field="category")
    if "adversarial_answer" in rec:
        rec["adversarial_answer"] = _text(rec, "adversarial_answer", path, where, empty_ok=True)
    return rec


def read_prediction_lines(path: Path) -> list[dict[str, Any]]:
    """Every record of a predictions file, validated; duplicate ids name both lines."""
    records: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for lineno, rec in iter_jsonl(path):
        where = f"line {lineno}"
        rec = check_record(rec, path, where)
        key = str(rec["id"])
        if key in first_line:
            raise DataError(path, f"duplicate id {short_repr(key)}, first on line {first_line[key]} (each id is "
                                  "scored once)", record=where, field="id")
        first_line[key] = lineno
        records.append(rec)
    if not records:
        raise DataError(path, "no prediction lines")
    return records
