"""Score prediction records with metrics and aggregate overall and per category name.

A record is a dict with at least ``id``, ``prediction``, ``answer`` (or, for adversarial
questions, ``adversarial_answer``) and ``category``; ``category_name`` and ``question`` are used
when present. ``score`` and ``eval`` both end here, so their numbers agree by construction.

Every mean (per category and overall) carries ``<metric>_stderr``, its bootstrap standard error as
lm-evaluation-harness reports it: the questions of the group are resampled with replacement
``BOOTSTRAP_RESAMPLES`` times (one resample of questions serves every metric), and the stderr is the
sample standard deviation (ddof=1) of the resampled means. The generator is seeded
(``BOOTSTRAP_SEED``) and the questions are put in ``id`` order first, so the same predictions give the
same stderr whatever order they were answered in. A group with fewer than two scored questions has
``None`` (one question says nothing about spread; 0 would read as certainty). A metric that does not
apply to some questions (``None`` scores, counted in ``<metric>_n``) is averaged over the questions of
each resample it applies to.

A metric judged in several runs (``llm_judge`` with ``judge.runs=N>1``: :mod:`.judge`) gives each record
``<metric>_runs`` (one score per run) and ``<metric>`` (their mean, None unless every run scored it).
Each group then also has ``<metric>_std``: the standard deviation over the runs of the per-run means (the
run's score averaged over the group's scored questions), the "± std over 10 judge runs" of the Mem0
paper, taken as the judge's source takes it (``std_ddof`` of the metric, :func:`std_conventions`:
EverMemOS's ``np.std``, ddof 0; the sample std, ddof 1, for a source that reports none); the per-run means themselves go to results.json ``metric_runs``
(:func:`run_summary`). The group mean ``<metric>`` is exactly the mean of those per-run means, since
every run scores the same questions.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
from tqdm import tqdm

from ctxbench.core.types import Question
from ctxbench.llm.scope import call_scope
from ctxbench.metrics.base import Metric, answer_text, category_name
from ctxbench.metrics.cost import JUDGE_USAGE, judge_usage


def record_question(rec: dict[str, Any]) -> Question:
    return Question(id=str(rec["id"]), question=str(rec.get("question") or ""),
                    answer=answer_text(rec.get("answer")), category=rec.get("category", 0),
                    category_name=str(rec.get("category_name") or ""),
                    adversarial_answer=rec.get("adversarial_answer"),
                    meta={"abstention": True} if rec.get("abstention") else {})


def score_records(records: list[dict[str, Any]], metrics: list[Metric],
                  progress: bool = False) -> list[dict[str, Any]]:
    """Each record plus one field per metric (``None`` where a metric does not apply), and
    ``judge_usage`` (:func:`ctxbench.metrics.cost.judge_usage`) when judging it made LLM calls."""
    out = []
    for rec in tqdm(records, desc="scoring", disable=not progress, leave=False):
        q = record_question(rec)
        pred = str(rec.get("prediction") or "")
        scored = dict(rec)
        scored["category_name"] = category_name(q)
        with call_scope() as scope:  # what judging this answer cost (phase "judge", any judge's backend)
            scored.pop(JUDGED_BY, None)  # re-scored: the judges of this scoring only
            for m in metrics:
                scored.pop(m.name + RUNS_SUFFIX, None)  # a re-scored record (a finished run's) keeps no old runs
                runs = _run_scores(m, pred, q)
                if runs is None:
                    v = m.score(pred, q)
                else:
                    scored[m.name + RUNS_SUFFIX] = [None if x is None else round(float(x), 6) for x in runs]
                    v = None if any(x is None for x in runs) else sum(runs) / len(runs)
                scored[m.name] = None if v is None else round(float(v), 6)
                model = m.model() if callable(getattr(m, "model", None)) else None
                if model is not None and scored.get(m.name) is not None:  # who judged this row (report compare, board)
                    scored[JUDGED_BY] = {**(scored.get(JUDGED_BY) or {}), m.name: model}
                if str(q.id) in (getattr(m, "failed_ids", None) or ()):  # a judge call failed: counted wrong
                    scored[m.name + JUDGE_FAILED] = True
                else:
                    scored.pop(m.name + JUDGE_FAILED, None)
        judged = judge_usage(scope)
        if judged is None:
            scored.pop(JUDGE_USAGE, None)  # not judged this time: no count left from an earlier scoring
        else:
            scored[JUDGE_USAGE] = judged
        out.append(scored)
    return out


RUNS_SUFFIX, STD_SUFFIX = "_runs", "_std"
JUDGED_BY = "judged_by"  # a record's {judge metric: the judge model's name}
JUDGE_FAILED = "_judge_failed"  # a record's <metric>_judge_failed: a judge call failed, the answer scored WRONG


def judge_failures(scored: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """results.json ``judge_failures``: per judge metric with a failed call, how many answers it failed to
    label (each counted WRONG in the headline J) and J over the answers it labelled alone."""
    out: dict[str, Any] = {}
    for name in names:
        judged = [r for r in scored if r.get(name) is not None and not r.get("failed")]
        bad = [r for r in judged if r.get(name + JUDGE_FAILED)]
        if not bad:
            continue
        good = [float(r[name]) for r in judged if not r.get(name + JUDGE_FAILED)]
        out[name] = {"failed": len(bad), "judged": len(judged), "counted": "wrong (0) in the headline",
                     "labelled_only": {"n": len(good), name: round(sum(good) / len(good), 4) if good else None}}
    return out
FAILED_N = "failed_n"  # results.json: failed answers in a group, each scored 0 in the headline numbers


def failed_as_wrong(records: list[dict[str, Any]], metrics: list[Metric]) -> list[dict[str, Any]]:
    """Failed answers (``failed: true``) as scored rows for the headline numbers: 0 in every metric (J
    included, and 0 in each judge run), so a system cannot gain by failing on its hardest questions.
    Nothing is asked of a judge."""
    out = []
    for rec in records:
        row = dict(rec)
        row["category_name"] = category_name(record_question(rec))
        for m in metrics:
            runs = int(getattr(m, "runs", 1) or 1)
            if runs > 1 and hasattr(m, "score_runs"):
                row[m.name + RUNS_SUFFIX] = [0.0] * runs
            row[m.name] = 0.0
        out.append(row)
    return out


def count_failed(results: dict[str, Any], failed_rows: list[dict[str, Any]]) -> None:
    """``failed_n`` in ``overall`` and in every category of an :func:`aggregate` result (0 where none)."""
    results["overall"][FAILED_N] = len(failed_rows)
    for name, row in results["by_category"].items():
        row[FAILED_N] = sum(1 for r in failed_rows if r["category_name"] == name)


def _run_scores(metric: Metric, prediction: str, question: Question) -> list[float | None] | None:
    """Per-run scores of a metric judged more than once (``runs > 1`` and ``score_runs``), else None."""
    if int(getattr(metric, "runs", 1) or 1) > 1 and hasattr(metric, "score_runs"):
        return list(metric.score_runs(prediction, question))
    return None


def run_means(rows: list[dict[str, Any]], name: str) -> list[float] | None:
    """The per-run means of ``name`` over the rows scored in every run; None if no row has runs."""
    runs = [r[name + RUNS_SUFFIX] for r in rows if r.get(name) is not None
            and isinstance(r.get(name + RUNS_SUFFIX), list)]
    if not any(isinstance(r.get(name + RUNS_SUFFIX), list) for r in rows):
        return None
    if not runs:
        return []
    width = min(len(x) for x in runs)
    return [sum(float(x[i]) for x in runs) / len(runs) for i in range(width)]


def run_std(means: list[float] | None, ddof: int = 1) -> float | None:
    """Standard deviation of the per-run means (``ddof``: 1 the sample std, 0 EverMemOS's np.std); None
    for fewer than two runs."""
    if not means or len(means) < 2:
        return None
    return float(np.std(np.asarray(means, dtype=np.float64), ddof=ddof))


def std_conventions(metrics: list[Metric]) -> dict[str, dict[str, Any]]:
    """``{name: {"ddof", "convention"}}`` of the metrics judged in several runs whose source fixes how
    the std over runs is taken (a judge: :attr:`ctxbench.metrics.judges.prompt.JudgePrompt.std_ddof`)."""
    return {m.name: {"ddof": int(m.std_ddof), "convention": str(getattr(m, "std_source", ""))}
            for m in metrics if isinstance(getattr(m, "std_ddof", None), int)}


BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 1000, 1234
_CHUNK = 1 << 22  # resampled cells held at once (B x n is chunked over B to bound memory)


def bootstrap_stderr(values: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> list[float | None]:
    """Bootstrap stderr of each column's mean of ``values`` (questions × metrics, NaN = not scored).

    Rows are resampled with replacement ``resamples`` times (the same resamples for every column); a
    column with fewer than two non-NaN values gets ``None``.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n, m = x.shape
    valid = ~np.isnan(x)
    counts = valid.sum(axis=0)
    out: list[float | None] = [None] * m
    cols = [j for j in range(m) if counts[j] >= 2]
    if not cols or resamples < 2:
        return out
    filled = np.where(valid, x, 0.0)
    means = np.empty((resamples, m))
    rng = np.random.default_rng(seed)
    step = max(1, min(resamples, _CHUNK // n))
    for start in range(0, resamples, step):
        idx = rng.integers(0, n, size=(min(step, resamples - start), n))
        for j in cols:
            if counts[j] == n:
                means[start:start + len(idx), j] = filled[idx, j].mean(axis=1)
            else:  # mean over the resampled questions the metric applies to (none: NaN, skipped)
                k = valid[idx, j].sum(axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    means[start:start + len(idx), j] = filled[idx, j].sum(axis=1) / k
    for j in cols:
        col = means[:, j][~np.isnan(means[:, j])]
        out[j] = float(col.std(ddof=1)) if col.size >= 2 else None
    return out


def _id_key(row: dict[str, Any]) -> str:
    return str(row.get("id"))


def _means(rows: list[dict[str, Any]], names: Iterable[str], resamples: int = BOOTSTRAP_RESAMPLES,
           seed: int = BOOTSTRAP_SEED, stds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"n", <metric>, <metric>_stderr, [<metric>_n when some rows are unscored]}`` for one group."""
    names = list(names)
    ordered = sorted(rows, key=_id_key)
    table = np.array([[np.nan if r.get(k) is None else float(r[k]) for k in names] for r in ordered],
                     dtype=np.float64).reshape(len(ordered), len(names))
    stderrs = bootstrap_stderr(table, resamples, seed) if len(ordered) else [None] * len(names)
    agg: dict[str, Any] = {"n": len(rows)}
    for j, name in enumerate(names):
        vals = [r[name] for r in rows if r.get(name) is not None]
        agg[name] = round(sum(vals) / len(vals), 4) if vals else None
        agg[f"{name}_stderr"] = None if stderrs[j] is None else round(stderrs[j], 4)
        if len(vals) != len(rows):
            agg[f"{name}_n"] = len(vals)
        means = run_means(rows, name)
        if means is not None:
            std = run_std(means, int(((stds or {}).get(name) or {}).get("ddof", 1)))
            agg[name + STD_SUFFIX] = None if std is None else round(std, 4)
    return agg


def group_means(rows: list[dict[str, Any]], names: Iterable[str]) -> dict[str, Any]:
    """One group's results.json row (n, each metric's mean and bootstrap stderr), as ``by_category``'s
    rows are made: other groupings (:mod:`.evidence_age`) use it so their numbers read the same way."""
    return _means(rows, names)


def _cat_key(cat: Any) -> tuple[int, Any]:
    try:
        return (0, int(cat))
    except (TypeError, ValueError):
        return (1, str(cat))


def category_order(scored: list[dict[str, Any]]) -> list[str]:
    """The category names of scored rows in results.json order (by id: 1..5, then names)."""
    ids: dict[str, Any] = {}
    for r in scored:
        ids.setdefault(r["category_name"], r.get("category"))
    return sorted(ids, key=lambda n: _cat_key(ids[n]))


def aggregate(scored: list[dict[str, Any]], metric_names: list[str], resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED, stds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"overall": {n, metric, metric_stderr...}, "by_category": {name: {id, n, ...}}, "stderr": how}``;
    ``stds`` (:func:`std_conventions`) says how each judge's source takes the std over runs (default ddof 1)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    ids: dict[str, Any] = {}
    for r in scored:
        groups.setdefault(r["category_name"], []).append(r)
        ids.setdefault(r["category_name"], r.get("category"))
    by_cat = {}
    for name in sorted(groups, key=lambda n: _cat_key(ids[n])):
        by_cat[name] = {"id": ids[name], **_means(groups[name], metric_names, resamples, seed, stds)}
    out = {"overall": _means(scored, metric_names, resamples, seed, stds), "by_category": by_cat,
           "stderr": stderr_method(resamples, seed)}
    runs = run_summary(scored, metric_names, groups, stds)
    if runs:
        out["metric_runs"] = runs
    return out


def run_summary(scored: list[dict[str, Any]], metric_names: list[str],
                groups: dict[str, list[dict[str, Any]]], stds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """results.json ``metric_runs``: for each metric judged in several runs, the per-run means
    (overall and per category), how the std is taken, and whether every run gave the same scores."""
    out: dict[str, Any] = {}
    for name in metric_names:
        overall = run_means(scored, name)
        if overall is None:
            continue
        lists = [r[name + RUNS_SUFFIX] for r in scored if isinstance(r.get(name + RUNS_SUFFIX), list)]
        out[name] = {
            "runs": max((len(x) for x in lists), default=0),
            "overall": [round(v, 4) for v in overall],
            "by_category": {cat: [round(v, 4) for v in (run_means(rows, name) or [])] for cat, rows in groups.items()},
            "std": {"over": "runs", "of": "per-run mean", "min_runs": 2,
                    **((stds or {}).get(name) or {"ddof": 1, "convention": "the sample std (ddof 1)"})},
            "identical_runs": all(len(set(x)) <= 1 for x in lists),
        }
    return out


def stderr_method(resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """How ``<metric>_stderr`` was computed (written into results.json beside the numbers)."""
    return {"method": "bootstrap", "resamples": resamples, "seed": seed, "ddof": 1, "unit": "question",
            "min_n": 2}


def metric_versions(metrics: list[Metric]) -> dict[str, dict[str, Any]]:
    """results.json ``metrics``: each metric's version and reference, plus its settings when it has
    any (``llm_judge``: runs, temperature, seeds)."""
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        settings = getattr(m, "settings", None)
        out[m.name] = {"version": m.version, "reference": m.reference, **(settings() if callable(settings) else {})}
    return out
