"""The three result files every ``eval`` and ``score`` ends with: predictions.jsonl (each line with
its metric fields), results.json and results.md."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ctxbench.evaluation.resume import PREDICTIONS
from ctxbench.metrics.aggregate import (aggregate, count_failed, failed_as_wrong, judge_failures, metric_versions,
                                        score_records, std_conventions)
from ctxbench.metrics.base import Metric
from ctxbench.metrics.corrected import CORRECTED, corrected_block
from ctxbench.metrics.cost import COST_VERSION, aggregate_cost, judging_per_question
from ctxbench.evaluation import reuse
from ctxbench.metrics import evidence_recall, longmemeval_scoring
from ctxbench.metrics.evidence_age import by_evidence_age
from ctxbench.metrics.guards import run_warnings, warning_lines
from ctxbench.metrics.health import DEFAULT_MAX_FAILED_FRACTION, add_judge_failures, run_health
from ctxbench.metrics.stats import statistics_block
from ctxbench.metrics.judges.leniency import judges_block
from ctxbench.runs.results import atomic_write_text, results_markdown, run_metadata, write_json, write_jsonl

RESULTS_JSON, RESULTS_MD = "results.json", "results.md"


def finalize(out_dir: Path, records: list[dict[str, Any]], metrics: list[Metric], cfg: Any, command: str,
             with_cost: bool, extra: dict[str, Any] | None = None, progress: bool = True,
             max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION,
             placement: dict[str, Any] | None = None, kept: list[dict[str, Any]] | None = None,
             errata: Any = None, bypass_held_share: float | None = None) -> dict[str, Any]:
    """Score ``records``; write predictions.jsonl (with metric fields), results.json, results.md.

    Failed answers (``failed: true``) count as wrong in the headline numbers (``overall`` /
    ``by_category``: 0 in every metric, J included; ``failed_n`` counts them) and are left out of
    ``answered_only`` (the same shape, over the answered questions); in predictions.jsonl they are
    kept as they are, without metric fields, and re-answered on resume. ``health`` says how many
    calls, structured outputs and answers failed (:mod:`ctxbench.metrics.health`).
    ``by_evidence_age``: the same numbers grouped by how many sessions before the history's end each
    question's evidence was said (:mod:`ctxbench.metrics.evidence_age`), when questions carry evidence.
    ``longmemeval``: per LongMemEval question type, overall, task-averaged and abstention
    (:mod:`ctxbench.metrics.longmemeval_scoring`), when the questions carry those types;
    ``evidence_recall``: session- and turn-level recall@k / NDCG@k of what the system retrieved against the
    questions' evidence (:mod:`ctxbench.metrics.evidence_recall`), when records carry both.
    ``statistics``: per metric and category the per-question std, the minimum detectable difference
    and, for J, the Wilson 95% interval (:mod:`ctxbench.metrics.stats`).
    ``errata`` (:class:`ctxbench.data.errata.Errata`, from ``dataset.errata``): also scored under the
    corrected gold, results.json ``corrected`` (:mod:`ctxbench.metrics.corrected`).
    ``kept``: records outside this run's plan (answered under a higher ``limit``), written after the
    scored ones as they are, never scored; results.json ``kept_not_scored`` counts them.
    ``placement`` (where the models ran: device, dtype, processes) goes into ``provenance``.
    ``health.warnings`` flags results that bypass memory (:mod:`ctxbench.metrics.guards`; held context
    at ``bypass_held_share`` of the history, default the eval schema's), one console line each.
    """
    names = [m.name for m in metrics]
    records = [{k: v for k, v in r.items() if k != CORRECTED} for r in records]  # a previous scoring's
    answered = [r for r in records if not r.get("failed")]
    scored = score_records(answered, metrics, progress=progress)
    failed = failed_as_wrong([r for r in records if r.get("failed")], metrics)
    stds = std_conventions(metrics)  # each judge's std over runs as its source takes it
    results = aggregate(scored + failed, names, stds=stds)
    count_failed(results, failed)
    only = aggregate(scored, names, stds=stds)
    results["answered_only"] = {"overall": only["overall"], "by_category": only["by_category"]}
    results["statistics"] = statistics_block(scored + failed, names)
    ages = by_evidence_age(scored + failed, names)
    if ages is not None:  # questions with session evidence (LoCoMo): by how many sessions ago it was said
        results["by_evidence_age"] = ages
    lme = longmemeval_scoring.longmemeval_block(scored + failed, names)
    if lme is not None:  # LongMemEval question types: per type, overall, task-averaged, abstention
        results["longmemeval"] = lme
    recall = evidence_recall.evidence_recall(records)
    if recall is not None:  # systems that retrieve, on questions with evidence: session / turn recall@k, ndcg@k
        results["evidence_recall"] = recall
    fixes: dict[str, dict[str, Any]] = {}
    if errata is not None:
        results[CORRECTED], fixes = corrected_block(scored + failed, errata, metrics, progress=progress)
    results["metrics"] = metric_versions(metrics)
    # a partial config: score of a predictions file and the task runners may hand {} (no judge block)
    judges = judges_block(metrics, cfg.get("judge") if hasattr(cfg, "get") else None)
    if judges:  # each judge's prompt, model, decoding and (judge.calibration=) leniency
        results["judges"] = judges
    by_id = {str(r["id"]): r for r in scored}
    scored = [by_id.get(str(r["id"]), r) for r in records]  # failed ones as they are, in dataset order
    scored = [dict(r, **{CORRECTED: fixes[str(r["id"])]}) if str(r["id"]) in fixes else r for r in scored]
    failures = judge_failures(scored, names)  # answers a judge could not label: counted wrong in J
    if failures:
        results["judge_failures"] = failures
    if with_cost:
        results["cost"] = aggregate_cost(scored)  # scored: with what judging each answer cost
        results["health"] = add_judge_failures(run_health(records, max_failed_fraction), failures)
    elif judging_per_question(scored) is not None:  # score: no system cost, but judging is this run's own
        results["cost"] = {"version": COST_VERSION, "judging_per_question": judging_per_question(scored)}
    results.update(run_metadata(cfg, command, extra, placement=placement))
    if kept is not None:
        results["kept_not_scored"] = len(kept)
    add_warnings(results, scored, bypass_held_share)
    write_jsonl(out_dir / PREDICTIONS, scored + list(kept or []))
    write_json(out_dir / RESULTS_JSON, results)
    ex = extra or {}
    title = command + (f": {ex['system']}" if ex.get("system") else "")
    title += f" on {ex['dataset']}" if ex.get("dataset") else ""
    md = (results_markdown(results, names, title=title) + longmemeval_scoring.markdown(lme, names)
          + evidence_recall.markdown(recall) + reuse.markdown(results.get("reuse")))
    atomic_write_text(out_dir / RESULTS_MD, md)
    return results


def add_warnings(results: dict[str, Any], records: list[dict[str, Any]], threshold: float | None) -> None:
    """``health.warnings`` (and ``health.held_share`` when measured) from :func:`run_warnings`, one line
    each on stderr. ``score`` has no health of its own: its ``health`` is just the warnings, when any."""
    warnings, held = run_warnings(records, results, threshold)
    if "health" in results:
        results["health"]["warnings"] = warnings
        if held is not None:
            results["health"]["held_share"] = held
    elif warnings:
        results["health"] = {"warnings": warnings}
    for line in warning_lines(warnings):
        print(line, file=sys.stderr)


def summary_line(results: dict[str, Any], names: list[str]) -> str:
    """``n=… f1=… …``: the overall numbers, for the command's last line (failed answers count 0;
    with errata, the corrected gold's numbers follow as ``f1@corrected=…``)."""
    ov = results["overall"]
    parts = [f"n={ov['n']}" + (f" ({ov['failed_n']} failed, scored 0)" if ov.get("failed_n") else "")]
    parts += [f"{m}={ov[m]:.4f}" for m in names if ov.get(m) is not None]
    fixed = (results.get(CORRECTED) or {}).get("overall") or {}
    parts += [f"{m}@corrected={fixed[m]:.4f}" for m in names if fixed.get(m) is not None]
    return " ".join(parts)
