"""Statistics a reader can decide on: Wilson intervals, the minimum detectable difference, and the
paired bootstrap of two runs on the same questions.

- :func:`wilson`: the Wilson score 95% interval of a proportion (J: the share of answers a judge
  labels CORRECT). With integer successes it is scipy's ``binomtest(k, n).proportion_ci("wilson")``;
  J averaged over several judge runs is a fraction of a question per answer, and takes the same
  closed form with p̂ = J (the interval then covers the sampling of questions, not of judge runs).
- :func:`mdd`: the minimum detectable difference of a mean at the run's n, two-sided α = 0.05,
  power 0.8: ``MDD = (z_{1-α/2} + z_{power}) · s · sqrt(2 / n)`` with ``s`` the metric's per-question
  standard deviation (ddof=1) and z the standard normal quantiles (1.95996 + 0.84162 = 2.80159): the
  smallest difference between two systems of this spread, each scored on n questions, that a
  two-sample z-test detects 80% of the time. A paired comparison of two runs on the same questions
  (:func:`paired_bootstrap`, ``report compare``) usually detects less, since their per-question scores
  correlate; the MDD is the conservative figure a reader can have from one run alone.
- :func:`paired_bootstrap`: Δ = mean(B) − mean(A) over the questions both runs scored; the questions are
  resampled with replacement (the same resample for A and B), the 95% interval is the 2.5th and 97.5th
  percentiles of the resampled Δ, and the two-sided p is ``min(1, 2 · min(P*(Δ* ≤ 0), P*(Δ* ≥ 0)))``
  with P* the share of resamples, each counted as (count + 1) / (resamples + 1) so it is never 0:
  the smallest α at which the percentile interval excludes 0. Below :data:`COMPARE_MIN_N` pairs, or
  when every resample gives the same Δ (no variance to test: identical runs, or one question), there is
  no interval and no p — only Δ and a ``note`` ("n too small" / "no variance"): a bootstrap over one
  question once starred +0.07 with p = 0.0002.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

ALPHA, POWER = 0.05, 0.8
COMPARE_RESAMPLES, COMPARE_SEED = 10000, 1234
COMPARE_MIN_N = 10  # fewer paired questions: Δ only, no interval or p ("n too small")
_CHUNK = 1 << 22


def z_quantile(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def wilson(successes: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of ``successes`` out of ``n`` (None for n = 0)."""
    if n <= 0:
        return None
    k = float(successes)
    if abs(k - round(k)) < 1e-9:
        from scipy.stats import binomtest

        ci = binomtest(int(round(k)), int(n)).proportion_ci(confidence_level=level, method="wilson")
        return float(ci.low), float(ci.high)
    z = z_quantile(1 - (1 - level) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def mdd(std: float | None, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """``(z_{1-α/2} + z_power) · std · sqrt(2 / n)``; None without a std or for n < 2."""
    if std is None or n < 2:
        return None
    return (z_quantile(1 - alpha / 2) + z_quantile(power)) * float(std) * math.sqrt(2.0 / n)


def is_binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def group_statistics(rows: list[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Per metric of one group: ``{"n", "std", "mdd"}`` and, for a judge (``llm_judge*``), ``wilson95``.

    ``n`` and ``std`` are over the rows the metric scored (None = not scored); ``std`` has ddof=1."""
    out: dict[str, Any] = {}
    for name in names:
        vals = [float(r[name]) for r in rows if r.get(name) is not None]
        std = float(np.std(vals, ddof=1)) if len(vals) >= 2 else None
        d = mdd(std, len(vals))
        entry: dict[str, Any] = {"n": len(vals), "std": None if std is None else round(std, 4),
                                 "mdd": None if d is None else round(d, 4)}
        if name.startswith("llm_judge") and vals:
            ci = wilson(sum(vals), len(vals))
            entry["wilson95"] = None if ci is None else [round(ci[0], 4), round(ci[1], 4)]
            entry["binary"] = is_binary(vals)
        out[name] = entry
    return out


def statistics_block(scored: list[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """results.json ``statistics``: :func:`group_statistics` overall and per category, and how."""
    from ctxbench.metrics.aggregate import category_order

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in scored:
        groups.setdefault(r["category_name"], []).append(r)
    return {"overall": group_statistics(scored, names),
            "by_category": {c: group_statistics(groups[c], names) for c in category_order(scored)},
            "how": {"mdd": {"alpha": ALPHA, "power": POWER, "sides": 2,
                            "formula": "(z_{1-alpha/2} + z_{power}) * std * sqrt(2/n)", "std_ddof": 1},
                    "wilson95": {"level": 0.95, "of": "judge labels (J) over the group's questions"}}}


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = COMPARE_RESAMPLES,
                     seed: int = COMPARE_SEED) -> dict[str, Any]:
    """``{"n", "a", "b", "delta", "ci95", "p"}`` for Δ = mean(b) − mean(a) over paired values; ``ci95`` and
    ``p`` None with a ``note`` below :data:`COMPARE_MIN_N` pairs or when every resample is the same."""
    x = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return {"n": 0, "a": None, "b": None, "delta": None, "ci95": None, "p": None}
    delta = float(x.mean())
    head = {"n": n, "a": round(float(np.mean(a)), 4), "b": round(float(np.mean(b)), 4), "delta": round(delta, 4)}
    if n < COMPARE_MIN_N:
        return {**head, "ci95": None, "p": None, "note": f"n too small (< {COMPARE_MIN_N})"}
    if float(np.ptp(x)) == 0.0:  # every question differs by the same amount: every resample gives Δ
        return {**head, "ci95": None, "p": None, "note": "no variance (every resample gives the same difference)"}
    rng = np.random.default_rng(seed)
    stars = np.empty(resamples)
    step = max(1, min(resamples, _CHUNK // n))
    for start in range(0, resamples, step):
        idx = rng.integers(0, n, size=(min(step, resamples - start), n))
        stars[start:start + len(idx)] = x[idx].mean(axis=1)
    tol = 1e-12  # resampled means of equal values differ from 0 only by rounding
    low = (np.count_nonzero(stars <= tol) + 1) / (resamples + 1)
    high = (np.count_nonzero(stars >= -tol) + 1) / (resamples + 1)
    lo, hi = np.percentile(stars, [2.5, 97.5])
    return {**head, "ci95": [round(float(lo), 4), round(float(hi), 4)], "p": round(min(1.0, 2 * min(low, high)), 4)}
