"""Scoring under the corrected gold (``dataset.errata``): results.json ``corrected``.

The headline numbers (``overall`` / ``by_category``) stay under the dataset's original gold and keep
their names. With errata, every run is scored a second time: each question whose gold the errata
correct (:mod:`ctxbench.data.errata`) is scored against the corrected answer (a judge is asked again,
with the corrected answer), every other question keeps its score, failed answers stay 0. results.json
then has::

    "corrected": {
      "errata":  {file, rows, applied, citation_only, unchanged, mismatched, unknown, applied_by_kind,
                  mismatched_rows, unknown_rows, dataset_ceiling: {n, marked, ceiling, categories}},
      "ceiling": {n, marked, ceiling, categories}   # over this run's questions in the audited categories
      "changed": K,                                 # this run's questions scored against a corrected answer
      "record_mismatch": [ids],                     # a record whose own gold is not the errata's original
      "overall": {...}, "by_category": {...}        # the same shape and metric names as the headline
    }

and each changed line of predictions.jsonl carries ``"corrected": {"answer", "error_type", <metric>...}``.
"""
from __future__ import annotations

from typing import Any

from ctxbench.data.errata import Errata, ceiling_of
from ctxbench.metrics.aggregate import aggregate, count_failed, score_records, std_conventions
from ctxbench.metrics.base import Metric, answer_text

CORRECTED = "corrected"


def score_corrected(rows: list[dict[str, Any]], errata: Errata, metrics: list[Metric],
                    progress: bool = False) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """``rows`` (the headline's scored rows, failed ones at 0) under the corrected gold; the fields for
    each changed record's ``corrected``; the ids whose record gold is not the errata's original."""
    out, fields, mismatch = [], {}, []
    to_score = []
    for r in rows:
        fix = errata.corrections.get(str(r.get("id")))
        if fix is None:
            continue
        if answer_text(r.get("answer")).strip() != fix.original.strip():
            mismatch.append(str(r["id"]))
            continue
        fields[str(r["id"])] = {"answer": fix.answer, "error_type": fix.kind}
        if not r.get("failed"):
            to_score.append(dict(r, answer=fix.answer))
    rescored = {str(r["id"]): r for r in score_records(to_score, metrics, progress=progress)}
    names = [m.name for m in metrics]
    for r in rows:
        rid = str(r.get("id"))
        if rid not in fields:
            out.append(r)
            continue
        new = rescored.get(rid) or dict(r, answer=fields[rid]["answer"])  # failed: its zeros stand
        out.append(new)
        if rid in rescored:  # a failed line keeps no metric fields (its 0s are the headline's)
            fields[rid].update({k: new.get(k) for k in names})
    return out, fields, mismatch


def corrected_block(rows: list[dict[str, Any]], errata: Errata, metrics: list[Metric],
                    progress: bool = False) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """results.json ``corrected`` and the per-record ``corrected`` fields (by id)."""
    scored, fields, mismatch = score_corrected(rows, errata, metrics, progress)
    agg = aggregate(scored, [m.name for m in metrics], stds=std_conventions(metrics))
    count_failed(agg, [r for r in scored if r.get("failed")])
    audited = set(errata.audited)
    n: dict[str, int] = {}
    marked: dict[str, int] = {}
    ids: dict[str, Any] = {}
    for r in rows:
        cat = r["category_name"]
        if cat in audited:
            n[cat] = n.get(cat, 0) + 1
            ids.setdefault(cat, r.get("category"))
            if str(r.get("id")) in fields:
                marked[cat] = marked.get(cat, 0) + 1
    order = sorted(n, key=lambda c: str(ids.get(c)))
    block = {"errata": errata.summary(), "ceiling": ceiling_of({c: n[c] for c in order}, marked, ids),
             "changed": len(fields), "record_mismatch": mismatch,
             "overall": agg["overall"], "by_category": agg["by_category"]}
    return block, fields
