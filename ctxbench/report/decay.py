"""``python -m ctxbench report decay=RUN1,RUN2,...``: how each system's memory decays over a conversation.

Each run's results.json ``by_evidence_age`` (:mod:`ctxbench.metrics.evidence_age`: the questions grouped
by how many sessions before the conversation's end their evidence was said) side by side: per metric,
one row per run, one column per age bucket (mean ± bootstrap stderr, n), then the run's overall number.
A name may be a run folder or a folder holding runs (each of its runs with ``by_evidence_age`` is
read). A named run folder without ``by_evidence_age`` (a dataset without session evidence, or a run
from before it existed: re-score it with ``score predictions=<run>/predictions.jsonl``) is refused in
one line. Writes ``decay.md`` and ``decay.json`` (``out=`` names the markdown file; default
``outputs/report/decay_<first run>.md``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.metrics.evidence_age import DEFINITION, bucket_labels
from ctxbench.report.compare import run_paths
from ctxbench.report.markdown import MISSING, md_table
from ctxbench.report.runs import RESULTS_JSON, ReportError, Run, find_runs, load_run
from ctxbench.runs.results import atomic_write_text, write_json

OVERALL = "all"


def decay_runs(value: Any) -> list[Run]:
    """The runs ``decay=`` names: a run folder itself, or every run below a folder that has the ages."""
    paths = run_paths(value, "decay")
    if not paths:
        raise ReportError("decay= takes run folders (or folders holding runs), RUN1,RUN2,...")
    runs: list[Run] = []
    for p in paths:
        if not p.is_dir():
            raise ReportError(f"decay: {p}: no such folder")
        if (p / RESULTS_JSON).is_file():
            run = load_run(p)
            if not (run.results or {}).get("by_evidence_age"):
                raise ReportError(f"{p}: results.json has no by_evidence_age (its questions carry no session "
                                  f"evidence, or it predates it: score predictions={p / 'predictions.jsonl'})")
            runs.append(run)
            continue
        below = [r for r in find_runs([p]) if (r.results or {}).get("by_evidence_age")]
        if not below:
            raise ReportError(f"{p}: no run below it has results.json by_evidence_age")
        runs += below
    return runs


def run_record(run: Run) -> dict[str, Any]:
    """One run's row: its label, system, metrics, overall and per-bucket numbers."""
    res = run.results or {}
    return {"run": run.path.name, "path": str(run.path), "system": res.get("system"),
            "dataset": res.get("dataset"), "metrics": list((res.get("metrics") or {}).keys()),
            "overall": res.get("overall") or {}, "buckets": res["by_evidence_age"]}


def _cell(row: dict[str, Any] | None, metric: str) -> str:
    if not row or row.get(metric) is None:
        return MISSING
    se = row.get(f"{metric}_stderr")
    return f"{row[metric]:.3f}" + ("" if se is None else f" ± {se:.3f}") + f" (n={row.get('n')})"


def decay_markdown(records: list[dict[str, Any]]) -> str:
    """Per metric (those of the first run, in its order, that any run has) a table runs × buckets."""
    buckets = [b for b in bucket_labels() if any(b in r["buckets"] for r in records)]
    metrics = [m for m in dict.fromkeys(m for r in records for m in r["metrics"])
               if any(m in row for r in records for row in r["buckets"].values())]
    lines = ["# Accuracy by evidence age", "",
             f"Columns: sessions before the conversation's end that a question's evidence was said ({DEFINITION}); "
             f"`{OVERALL}` = the run's overall number. Cells: mean ± bootstrap stderr (n questions); failed answers "
             "count 0.", ""]
    for metric in metrics:
        rows = [[r["run"], *(_cell(r["buckets"].get(b), metric) for b in buckets), _cell(r["overall"], metric),
                 r.get("system") or MISSING] for r in records]
        lines += [f"## {metric}", "", md_table(["run", *buckets, OVERALL, "system"], rows, formatter=str), ""]
    return "\n".join(lines)


def decay_report(value: Any, out: str | None = None) -> dict[str, Any]:
    """``report decay=A,B,...``: decay.md and decay.json; returns the records, the markdown and ``path``."""
    records = [run_record(r) for r in decay_runs(value)]
    md = Path(out) if out else Path("outputs/report") / f"decay_{records[0]['run']}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    write_json(md.with_suffix(".json"), records)
    text = decay_markdown(records)
    atomic_write_text(md, text)
    return {"records": records, "markdown": text, "path": str(md)}
