"""LongMemEval's numbers: accuracy per question type, overall, task-averaged and on abstention.

As xiaowu0162/LongMemEval ``src/evaluation/print_qa_metrics.py`` reports them, for every metric of
the run (``llm_judge`` under the ``longmemeval`` judge is the paper's accuracy; F1 and the others
grouped the same way):

- ``by_type``: the mean per question type (:data:`TYPES`); an abstention question counts in its own
  type, as in the paper;
- ``overall``: the mean over every question;
- ``task_averaged``: the mean of the type means (the paper's six types; over the types present when
  a run holds fewer, ``types`` says how many);
- ``abstention``: the mean over the abstention questions (id ending ``_abs``) apart.

Failed answers count 0 as in the headline numbers (the records given are the scored and the failed
rows); a metric that does not apply to a question (``None``) is left out of that metric's means.
"""
from __future__ import annotations

from typing import Any

from ctxbench.data.categories import canonical_name, record_is_abstention

TYPES = ("single-session-user", "single-session-preference", "single-session-assistant", "multi-session",
         "temporal-reasoning", "knowledge-update")
SOURCE = "xiaowu0162/LongMemEval src/evaluation/print_qa_metrics.py"


def record_type(record: dict[str, Any]) -> str | None:
    """The LongMemEval question type of a record (its category name), or None."""
    name = canonical_name(str(record.get("category_name") or record.get("category") or ""))
    return name if name in TYPES else None


def _mean(records: list[dict[str, Any]], metric: str) -> float | None:
    vals = [float(r[metric]) for r in records if r.get(metric) is not None]
    return round(sum(vals) / len(vals), 6) if vals else None


def _means(records: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    return {m: _mean(records, m) for m in names}


def longmemeval_block(records: list[dict[str, Any]], names: list[str]) -> dict[str, Any] | None:
    """results.json ``longmemeval`` (module doc), or None when no record carries a LongMemEval type."""
    typed = [(record_type(r), r) for r in records]
    if not any(t for t, _ in typed):
        return None
    by_type: dict[str, Any] = {}
    for t in TYPES:
        group = [r for rt, r in typed if rt == t]
        if group:
            by_type[t] = {"n": len(group), **_means(group, names)}
    task: dict[str, Any] = {}
    for m in names:
        means = [row[m] for row in by_type.values() if row.get(m) is not None]
        task[m] = round(sum(means) / len(means), 6) if means else None
    abstain = [r for _, r in typed if record_is_abstention(r)]
    return {"source": SOURCE, "by_type": by_type, "overall": {"n": len(records), **_means(records, names)},
            "task_averaged": {"types": len(by_type), **task},
            "abstention": {"n": len(abstain), **_means(abstain, names)}}


def markdown(block: dict[str, Any] | None, names: list[str]) -> str:
    """results.md's LongMemEval section: one row per type, then overall, task-averaged and abstention."""
    if not block:
        return ""
    cols = [m for m in names if any(row.get(m) is not None for row in block["by_type"].values())] or list(names)

    def cells(row: dict[str, Any]) -> str:
        return " | ".join("—" if row.get(m) is None else f"{row[m]:.4f}" for m in cols)

    lines = ["", "## LongMemEval", "", f"As {SOURCE} reports them (failed answers count 0).", "",
             "| question type | n | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for t, row in block["by_type"].items():
        lines.append(f"| {t} | {row['n']} | {cells(row)} |")
    lines.append(f"| **overall** | {block['overall']['n']} | {cells(block['overall'])} |")
    lines.append(f"| **task-averaged** ({block['task_averaged']['types']} types) | | {cells(block['task_averaged'])} |")
    lines.append(f"| abstention | {block['abstention']['n']} | {cells(block['abstention'])} |")
    return "\n".join(lines) + "\n"
