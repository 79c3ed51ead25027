"""Two runs' payloads on the same questions → the paired difference per metric and the disagreements.

Pairs are every question both runs were asked, a failed answer scoring 0 in every metric (the headline's
rule, as in ``report compare``). Per metric: Δ = mean over pairs of (B − A), its bootstrap standard error
(:func:`ctxbench.metrics.aggregate.bootstrap_stderr` of the per-question differences) and the 95%
paired-bootstrap interval and p (:func:`ctxbench.metrics.stats.paired_bootstrap`). A question
*disagrees* when a judge both runs have labels it differently (label = score ≥ 0.5) or a non-judge
metric differs by more than ``threshold``. Questions only in one run are listed by id.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ctxbench.metrics.aggregate import bootstrap_stderr
from ctxbench.metrics.stats import paired_bootstrap

LABEL_AT = 0.5  # a judge score (a label, or a majority of runs) at or above this is "correct"
PAIR_RESAMPLES = 2000  # the viewer's bootstrap (report compare uses 10,000 for its p)


def _label(v: float | None) -> bool | None:
    return None if v is None else v >= LABEL_AT


def _score(row: dict[str, Any], metric: str) -> float | None:
    return 0.0 if row["failed"] else row["scores"].get(metric)


def pair_payload(a: dict[str, Any], b: dict[str, Any], threshold: float = 0.3) -> dict[str, Any]:
    """``{metrics: [{metric, n, a, b, delta, se, ci95, p}], disagree: [{id, why}], only_a, only_b, n_pairs}``."""
    rows_a = {r["id"]: r for r in a["rows"]}
    rows_b = {r["id"]: r for r in b["rows"]}
    shared = [i for i in rows_a if i in rows_b]
    pairs = shared
    metrics = [m for m in a["metrics"] if m in b["metrics"]]
    out = []
    for m in metrics:
        both = [(_score(rows_a[i], m), _score(rows_b[i], m)) for i in pairs]
        both = [(x, y) for x, y in both if x is not None and y is not None]
        if not both:
            continue
        xa, xb = [x for x, _ in both], [y for _, y in both]
        boot = paired_bootstrap(xa, xb, resamples=PAIR_RESAMPLES)
        se = bootstrap_stderr(np.asarray(xb) - np.asarray(xa), resamples=PAIR_RESAMPLES)[0]
        out.append({"metric": m, "n": boot["n"], "a": boot["a"], "b": boot["b"], "delta": boot["delta"],
                    "se": None if se is None else round(se, 4), "ci95": boot["ci95"], "p": boot["p"]})
    judges = [m for m in metrics if m.startswith("llm_judge")]
    disagree = []
    for i in shared:
        ra, rb = rows_a[i], rows_b[i]
        why = []
        if ra["failed"] != rb["failed"]:
            why.append("failed in " + ("A" if ra["failed"] else "B"))
        for m in metrics:
            x, y = ra["scores"].get(m), rb["scores"].get(m)
            if x is None or y is None:
                continue
            if m in judges:
                if _label(x) != _label(y):
                    why.append(f"{m}: {'correct' if _label(x) else 'wrong'} → {'correct' if _label(y) else 'wrong'}")
            elif abs(y - x) > threshold:
                why.append(f"{m}: {x:.2f} → {y:.2f}")
        if why:
            disagree.append({"id": i, "why": why})
    return {"metrics": out, "disagree": disagree, "threshold": threshold, "label_at": LABEL_AT,
            "n_shared": len(shared), "n_pairs": len(pairs),
            "only_a": [i for i in rows_a if i not in rows_b], "only_b": [i for i in rows_b if i not in rows_a]}
