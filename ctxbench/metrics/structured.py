"""Counting structured replies: per phase (construction, answer) and per kind of call.

A system's :class:`~ctxbench.memory.stores.structured.StructuredCaller` counts each request's
outcome under ``structured|<phase>|<kind>|<field>``: building a history in the system's counts
(persisted with its state), each answer in its own; :func:`structured_report` turns counts into a
report, :func:`add_outputs` adds output counts up (a history's construction and its answers: results.json's
``cost.structured_output``). Next to the outcomes: ``retried`` (retries sent), ``retries_saved``
(calls not sent because they could not help), ``normalised`` (valid replies that needed a harmless
variant rewritten, :mod:`ctxbench.llm.normalize`; per variant in ``normalised_by``) and
``unenforced`` (of those, replies the server said it had decoded under the schema).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

OUTCOMES = ("valid", "invalid", "truncated", "failed")
FIELDS = ("calls", *OUTCOMES, "retried", "retries_saved", "normalised", "unenforced")
PREFIX = "structured"
BY = "normalised:"  # field prefix of one normalised variant: normalised:<variant>


def structured_report(counts: Counter | dict[str, Any]) -> dict[str, Any]:
    """``{phase: {calls, valid, invalid, truncated, failed, retried, retries_saved, normalised,
    unenforced, normalised_by: {variant: n}, by_kind: {kind: {... normalised_by}}}}`` from counts."""
    out: dict[str, Any] = {}
    for key, n in counts.items():
        parts = str(key).split("|")
        if len(parts) != 4 or parts[0] != PREFIX or not (parts[3] in FIELDS or parts[3].startswith(BY)):
            continue
        _, phase, kind, field = parts
        ph = out.setdefault(phase, {**{f: 0 for f in FIELDS}, "normalised_by": {}, "by_kind": {}})
        k = ph["by_kind"].setdefault(kind, {**{f: 0 for f in FIELDS}, "normalised_by": {}})
        for c in (ph, k):
            if field.startswith(BY):
                c["normalised_by"][field[len(BY):]] = c["normalised_by"].get(field[len(BY):], 0) + int(n)
            else:
                c[field] += int(n)
    return out


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of several :func:`structured_report` results (e.g. one per history)."""
    total: Counter = Counter()
    for rep in reports:
        for phase, ph in (rep or {}).items():
            for kind, c in (ph.get("by_kind") or {}).items():
                for f in FIELDS:
                    total[f"{PREFIX}|{phase}|{kind}|{f}"] += int(c.get(f, 0) or 0)
                for v, n in (c.get("normalised_by") or {}).items():
                    total[f"{PREFIX}|{phase}|{kind}|{BY}{v}"] += int(n or 0)
    return structured_report(total)


def add_outputs(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of several ``output_counts`` (``{structured_calls, invalid_outputs, structured_output}``)."""
    return {"structured_calls": sum(int(o.get("structured_calls", 0) or 0) for o in outputs),
            "invalid_outputs": sum(int(o.get("invalid_outputs", 0) or 0) for o in outputs),
            "structured_output": merge_reports([o.get("structured_output") or {} for o in outputs])}


def report_line(rep: dict[str, Any]) -> str:
    """``structured 140/142 valid (1 truncated, 1 invalid, 0 failed, 3 retried)`` over all phases, or '';
    normalised replies, retries saved and unenforced ones are added when there are any."""
    tot = {f: sum(int(ph.get(f, 0) or 0) for ph in rep.values()) for f in FIELDS}
    if not tot["calls"]:
        return ""
    extra = "".join(f", {tot[f]} {f.replace('_', ' ')}" for f in ("normalised", "retries_saved", "unenforced")
                    if tot[f])
    return (f"structured {tot['valid']}/{tot['calls']} valid ({tot['truncated']} truncated, {tot['invalid']} invalid, "
            f"{tot['failed']} failed, {tot['retried']} retried{extra})")
