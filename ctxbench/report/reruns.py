"""``python -m ctxbench report reruns=RUN1,RUN2,...``: the variance of the system, apart from the judge's.

Two sources of spread, reported apart:

- **end-to-end reruns** (the variance of the system): the same config run several times, each run
  folder answering (and judging) anew. Per metric, overall and per category: each run's headline mean
  (results.json), their mean and standard deviation over runs (ddof=1), min and max. This spread holds
  everything that differs between runs: the system's sampling, memory construction, the judge.
- **judge reruns** (the variance of the judge): one run's answers judged ``judge.runs`` times
  (results.json ``<metric>_std``, the std over runs of the per-run means; ``metric_runs``). Shown
  beside the end-to-end std for each judged metric, as each run's own value and their mean.

The runs must have been asked the same questions (the board's question hash) or the command refuses in
one line; config keys that differ between the runs (other than the run folder) are listed, since
reruns of *one* config is what the spread means. Writes ``reruns.json`` and ``reruns.md`` (``out=``
names the markdown file; default ``outputs/report/reruns_<first run>.md``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxbench.report.board import question_hash
from ctxbench.report.compare import RunScores, load_scores, run_paths
from ctxbench.report.runs import ReportError
from ctxbench.runs.results import atomic_write_text, write_json

IGNORED_CONFIG = ("hydra", "run_dir", "progress", "force_resume")


def _spread(values: list[float | None]) -> dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    return {"runs": [None if v is None else round(float(v), 4) for v in values],
            "mean": round(float(np.mean(vals)), 4) if vals else None,
            "std": round(float(np.std(vals, ddof=1)), 4) if len(vals) >= 2 else None,
            "min": round(min(vals), 4) if vals else None, "max": round(max(vals), 4) if vals else None}


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return {k.rstrip("."): v for k, v in out.items()}


def config_differences(runs: list[RunScores]) -> list[str]:
    """Config keys (dotted) whose values differ between the runs' results.json ``config``."""
    flats = [_flat({k: v for k, v in (r.results.get("config") or {}).items() if k not in IGNORED_CONFIG})
             for r in runs]
    keys = sorted(set().union(*flats)) if flats else []
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def reruns_summary(runs: list[RunScores]) -> dict[str, Any]:
    """reruns.json: per metric the end-to-end spread over runs and, for a judged metric, the judge's."""
    for r in runs:
        if not (r.results.get("overall") or {}):
            raise ReportError(f"{r.path}: no results.json with overall numbers")
    hashes = [question_hash(r.ids) for r in runs]
    if len(set(hashes)) != 1 or hashes[0] is None:
        raise ReportError("reruns were asked different questions (question hashes "
                          + ", ".join(f"{r.path.name}={h}" for r, h in zip(runs, hashes))
                          + "); reruns of one config answer the same questions")
    names = [m for m in runs[0].metrics if "@" not in m and all(m in r.metrics for r in runs)]
    cats = list(runs[0].results.get("by_category") or {})
    out: dict[str, Any] = {"runs": [str(r.path) for r in runs], "questions": hashes[0],
                           "config_differs": config_differences(runs), "metrics": {}}
    for m in names:
        node: dict[str, Any] = {"end_to_end": {
            "overall": _spread([(r.results["overall"]).get(m) for r in runs]),
            "by_category": {c: _spread([((r.results.get("by_category") or {}).get(c) or {}).get(m) for r in runs])
                            for c in cats}}}
        judge = [(r.results["overall"]).get(f"{m}_std") for r in runs]
        if any(v is not None for v in judge):
            vals = [v for v in judge if v is not None]
            node["judge"] = {"std_per_run": judge, "mean_std": round(float(np.mean(vals)), 4),
                             "judge_runs": [((r.results.get("metric_runs") or {}).get(m) or {}).get("runs")
                                            for r in runs]}
        out["metrics"][m] = node
    return out


def _f(v: Any) -> str:
    return "–" if v is None else f"{v:.4f}"


def reruns_markdown(res: dict[str, Any]) -> str:
    from ctxbench.core.markdown_table import md_table

    lines = ["# Reruns: the variance of the system", ""] + [f"- `{p}`" for p in res["runs"]]
    lines += ["", f"{len(res['runs'])} runs on the same questions (hash {res['questions']}). End-to-end: each "
                  "run's headline mean, their mean ± std over runs (ddof=1), min and max: the variance of the "
                  "system (answers and judging redone). Judge: the std over judge reruns of one run's answers "
                  "(`judge.runs`), the variance of the judge alone.", ""]
    if res["config_differs"]:
        lines += [f"Config keys that differ between the runs: {', '.join(res['config_differs'])}.", ""]
    rows = []
    for m, node in res["metrics"].items():
        e = node["end_to_end"]["overall"]
        j = node.get("judge") or {}
        rows.append([m, " / ".join(_f(v) for v in e["runs"]), _f(e["mean"]), _f(e["std"]),
                     f"{_f(e['min'])} – {_f(e['max'])}", _f(j.get("mean_std")) if j else "–"])
    lines += [md_table(["metric", "per run", "mean", "std over runs (system)", "range",
                        "std over judge reruns (judge)"], rows, formatter=str), ""]
    for m, node in res["metrics"].items():
        cats = node["end_to_end"]["by_category"]
        if cats:
            lines += [f"## {m} by category", "", md_table(
                ["category", "mean", "std over runs", "range"],
                [[c, _f(s["mean"]), _f(s["std"]), f"{_f(s['min'])} – {_f(s['max'])}"] for c, s in cats.items()],
                formatter=str), ""]
    return "\n".join(lines)


def reruns_report(value: Any, out: str | None = None) -> dict[str, Any]:
    """``report reruns=A,B,...``: reruns.json and reruns.md; returns the summary plus ``path``."""
    paths = run_paths(value, "reruns")
    if len(paths) < 2:
        raise ReportError(f"reruns= takes two or more run folders of one config, A,B,...; got {len(paths)}")
    res = reruns_summary([load_scores(p) for p in paths])
    md = Path(out) if out else Path("outputs/report") / f"reruns_{Path(res['runs'][0]).name}.md"
    write_json(md.with_suffix(".json"), res)
    text = reruns_markdown(res)
    atomic_write_text(md, text)
    return {**res, "path": str(md), "markdown": text}
