"""The three result files every ``eval`` and ``score`` ends with: predictions.jsonl (each line with
its metric fields), results.json and results.md."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.evaluation.resume import PREDICTIONS
from ctxbench.metrics.aggregate import aggregate, metric_versions, score_records
from ctxbench.metrics.base import Metric
from ctxbench.metrics.cost import aggregate_cost
from ctxbench.metrics.health import DEFAULT_MAX_FAILED_FRACTION, run_health
from ctxbench.metrics.judges.leniency import judges_block
from ctxbench.runs.results import atomic_write_text, results_markdown, run_metadata, write_json, write_jsonl

RESULTS_JSON, RESULTS_MD = "results.json", "results.md"


def finalize(out_dir: Path, records: list[dict[str, Any]], metrics: list[Metric], cfg: Any, command: str,
             with_cost: bool, extra: dict[str, Any] | None = None, progress: bool = True,
             max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION,
             placement: dict[str, Any] | None = None, kept: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Score ``records``; write predictions.jsonl (with metric fields), results.json, results.md.

    Failed answers (``failed: true``) are kept in predictions.jsonl but not scored; ``health``
    says how many calls, structured outputs and answers failed (:mod:`ctxbench.metrics.health`).
    ``kept``: records outside this run's plan (answered under a higher ``limit``), written after the
    scored ones as they are, never scored; results.json ``kept_not_scored`` counts them.
    ``placement`` (where the models ran: device, dtype, processes) goes into ``provenance``.
    """
    names = [m.name for m in metrics]
    answered = [r for r in records if not r.get("failed")]
    scored = score_records(answered, metrics, progress=progress)
    results = aggregate(scored, names)
    results["metrics"] = metric_versions(metrics)
    judges = judges_block(metrics, cfg.get("judge") if hasattr(cfg, "get") else None)
    if judges:  # each judge's prompt, model, decoding and (judge.calibration=) leniency
        results["judges"] = judges
    if with_cost:
        results["cost"] = aggregate_cost(records)
        results["health"] = run_health(records, max_failed_fraction)
    by_id = {str(r["id"]): r for r in scored}
    scored = [by_id.get(str(r["id"]), r) for r in records]  # failed ones as they are, in dataset order
    results.update(run_metadata(cfg, command, extra, placement=placement))
    if kept is not None:
        results["kept_not_scored"] = len(kept)
    write_jsonl(out_dir / PREDICTIONS, scored + list(kept or []))
    write_json(out_dir / RESULTS_JSON, results)
    ex = extra or {}
    title = command + (f": {ex['system']}" if ex.get("system") else "")
    title += f" on {ex['dataset']}" if ex.get("dataset") else ""
    atomic_write_text(out_dir / RESULTS_MD, results_markdown(results, names, title=title))
    return results


def summary_line(results: dict[str, Any], names: list[str]) -> str:
    """``n=… f1=… …``: the overall numbers, for the command's last line."""
    ov = results["overall"]
    parts = [f"n={ov['n']}"] + [f"{m}={ov[m]:.4f}" for m in names if ov.get(m) is not None]
    return " ".join(parts)
