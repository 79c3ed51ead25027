"""Score prediction records with metrics and aggregate overall and per category name.

A record is a dict with at least ``id``, ``prediction``, ``answer`` (or, for adversarial
questions, ``adversarial_answer``) and ``category``; ``category_name`` and ``question`` are used
when present. ``score`` and ``eval`` both end here, so their numbers agree by construction.
"""
from __future__ import annotations

from typing import Any, Iterable

from tqdm import tqdm

from ..types import Question
from .base import Metric, answer_text, category_name


def record_question(rec: dict[str, Any]) -> Question:
    return Question(id=str(rec["id"]), question=str(rec.get("question") or ""),
                    answer=answer_text(rec.get("answer")), category=rec.get("category", 0),
                    category_name=str(rec.get("category_name") or ""),
                    adversarial_answer=rec.get("adversarial_answer"))


def score_records(records: list[dict[str, Any]], metrics: list[Metric],
                  progress: bool = False) -> list[dict[str, Any]]:
    """Each record plus one field per metric (``None`` where a metric does not apply)."""
    out = []
    for rec in tqdm(records, desc="scoring", disable=not progress, leave=False):
        q = record_question(rec)
        pred = str(rec.get("prediction") or "")
        scored = dict(rec)
        scored["category_name"] = category_name(q)
        for m in metrics:
            v = m.score(pred, q)
            scored[m.name] = None if v is None else round(float(v), 6)
        out.append(scored)
    return out


def _means(rows: list[dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
    agg: dict[str, Any] = {"n": len(rows)}
    for name in names:
        vals = [r[name] for r in rows if r.get(name) is not None]
        agg[name] = round(sum(vals) / len(vals), 4) if vals else None
        if len(vals) != len(rows):
            agg[f"{name}_n"] = len(vals)
    return agg


def _cat_key(cat: Any) -> tuple[int, Any]:
    try:
        return (0, int(cat))
    except (TypeError, ValueError):
        return (1, str(cat))


def aggregate(scored: list[dict[str, Any]], metric_names: list[str]) -> dict[str, Any]:
    """``{"overall": {n, metric...}, "by_category": {name: {id, n, metric...}}}``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    ids: dict[str, Any] = {}
    for r in scored:
        groups.setdefault(r["category_name"], []).append(r)
        ids.setdefault(r["category_name"], r.get("category"))
    by_cat = {}
    for name in sorted(groups, key=lambda n: _cat_key(ids[n])):
        by_cat[name] = {"id": ids[name], **_means(groups[name], metric_names)}
    return {"overall": _means(scored, metric_names), "by_category": by_cat}


def metric_versions(metrics: list[Metric]) -> dict[str, dict[str, str]]:
    return {m.name: {"version": m.version, "reference": m.reference} for m in metrics}
