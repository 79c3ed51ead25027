"""One row of a published artifact, as its format reader hands it to the matcher, and the small
checks every reader shares (each refusal one :class:`DataError` line naming the file and the key)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.data.records import read_json, short_repr

TRAILING_INT = re.compile(r"(\d+)$")


@dataclass
class ArtifactRow:
    """``conversation``: the artifact's key for the conversation; ``conv_index``: the LoCoMo conversation it
    names (0-based, file order); ``location``: where the row is in the file (``key[i]``); ``labels``: the
    stored judge labels, one per judge run (1.0 / 0.0 / None), or None when the artifact has none;
    ``category``: the artifact's own category label (None if it has none); ``stored``: per-question metric
    values the artifact carries; ``qa_index``: the question's index in its LoCoMo conversation when the
    artifact names it; ``gold``: the artifact's own gold answer (information only, never scored);
    ``question_id``: the dataset's question id when the artifact names it (LongMemEval: rows are matched by
    it, :func:`ctxbench.referee.match.match_by_id`); ``judge_model``: the model the stored label names."""

    conversation: str
    conv_index: int
    location: str
    question: str
    prediction: str
    labels: list[float | None] | None = None
    category: Any = None
    stored: dict[str, float] = field(default_factory=dict)
    qa_index: int | None = None
    gold: Any = None
    question_id: str | None = None
    judge_model: str | None = None


def load_object(path: Path) -> Any:
    return read_json(path)


def need_mapping(data: Any, path: Path, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise DataError(path, f"expected a JSON object {what}, got {type(data).__name__}")
    return data


def need_list(val: Any, path: Path, key: str) -> list[Any]:
    if not isinstance(val, list):
        raise DataError(path, f"expected a list of question rows, got {type(val).__name__} ({short_repr(val)})",
                        field=key)
    return val


def need_row(val: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(val, dict):
        raise DataError(path, f"expected an object per question, got {type(val).__name__} ({short_repr(val)})",
                        record=where)
    return val


def text_field(row: dict[str, Any], key: str, path: Path, where: str, empty_ok: bool = True) -> str:
    """A string (or integer) field of a row as text."""
    if key not in row:
        raise DataError(path, "missing required field", record=where, field=key)
    val = row[key]
    if isinstance(val, bool) or not isinstance(val, (str, int)):
        raise DataError(path, f"must be a string, got {type(val).__name__} ({short_repr(val)})", record=where,
                        field=key)
    val = str(val)
    if not empty_ok and not val.strip():
        raise DataError(path, "is empty; a non-empty string is required", record=where, field=key)
    return val


def label_value(val: Any, path: Path, where: str, key: str) -> float | None:
    """A stored judge label: true/false, 1/0, "CORRECT"/"WRONG" → 1.0/0.0; null → None."""
    if val is None:
        return None
    if isinstance(val, bool):
        return float(val)
    if isinstance(val, (int, float)) and val in (0, 1):
        return float(val)
    if isinstance(val, str) and val.strip().upper() in ("CORRECT", "WRONG"):
        return float(val.strip().upper() == "CORRECT")
    raise DataError(path, f"a judge label must be true/false, 0/1 or CORRECT/WRONG, got {short_repr(val)}",
                    record=where, field=key)


def number_field(row: dict[str, Any], key: str, path: Path, where: str) -> float | None:
    if key not in row or row[key] is None:
        return None
    val = row[key]
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise DataError(path, f"must be a number, got {short_repr(val)}", record=where, field=key)
    return float(val)


def conversation_index(key: str, path: Path) -> int:
    """The LoCoMo conversation (0-based, file order) an artifact key names: its trailing integer
    (``"3"``, ``"locomo_exp_user_3"``, ``"locomo_experiment_user_3"``)."""
    m = TRAILING_INT.search(str(key))
    if m is None:
        raise DataError(path, "a conversation key must end in the conversation's index (0 = the first "
                              "conversation of the LoCoMo file)", field=str(key))
    return int(m.group(1))


def grouped_rows(data: dict[str, Any], path: Path, prefix: str = ""):
    """``{conversation key: [row, ...]}`` → (key, conversation index, location, row) for every row, each
    row checked to be an object; ``prefix`` names where the mapping sits in the file (e.g. ``detailed_results.``)."""
    for key, rows in data.items():
        idx = conversation_index(key, path)
        for i, raw in enumerate(need_list(rows, path, f"{prefix}{key}")):
            where = f"{prefix}{key}[{i}]"
            yield key, idx, where, need_row(raw, path, where)
