"""Counting structured replies: per phase (construction, answer) and per kind of call.

A system's :class:`~ctxbench.memory.stores.structured.StructuredCaller` counts each request's
outcome under ``structured|<phase>|<kind>|<field>``: building a history in the system's counts
(persisted with its state), each answer in its own; :func:`structured_report` turns counts into a
report, :func:`add_outputs` adds output counts up (a history's construction and its answers: results.json's
``cost.structured_output``).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

OUTCOMES = ("valid", "invalid", "truncated", "failed")
FIELDS = ("calls", *OUTCOMES, "retried")
PREFIX = "structured"


def structured_report(counts: Counter | dict[str, Any]) -> dict[str, Any]:
    """``{phase: {calls, valid, invalid, truncated, failed, retried, by_kind: {kind: {...}}}}`` from counts."""
    out: dict[str, Any] = {}
    for key, n in counts.items():
        parts = str(key).split("|")
        if len(parts) != 4 or parts[0] != PREFIX or parts[3] not in FIELDS:
            continue
        _, phase, kind, field = parts
        ph = out.setdefault(phase, {**{f: 0 for f in FIELDS}, "by_kind": {}})
        ph[field] += int(n)
        ph["by_kind"].setdefault(kind, {f: 0 for f in FIELDS})[field] += int(n)
    return out


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of several :func:`structured_report` results (e.g. one per history)."""
    total: Counter = Counter()
    for rep in reports:
        for phase, ph in (rep or {}).items():
            for kind, c in (ph.get("by_kind") or {}).items():
                for f in FIELDS:
                    total[f"{PREFIX}|{phase}|{kind}|{f}"] += int(c.get(f, 0) or 0)
    return structured_report(total)


def add_outputs(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of several ``output_counts`` (``{structured_calls, invalid_outputs, structured_output}``)."""
    return {"structured_calls": sum(int(o.get("structured_calls", 0) or 0) for o in outputs),
            "invalid_outputs": sum(int(o.get("invalid_outputs", 0) or 0) for o in outputs),
            "structured_output": merge_reports([o.get("structured_output") or {} for o in outputs])}


def report_line(rep: dict[str, Any]) -> str:
    """``structured 140/142 valid (1 truncated, 1 invalid, 3 retried)`` over all phases, or ''."""
    tot = {f: sum(int(ph.get(f, 0) or 0) for ph in rep.values()) for f in FIELDS}
    if not tot["calls"]:
        return ""
    return (f"structured {tot['valid']}/{tot['calls']} valid ({tot['truncated']} truncated, {tot['invalid']} invalid, "
            f"{tot['failed']} failed, {tot['retried']} retried)")
