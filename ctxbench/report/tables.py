"""``python -m ctxbench report table=NAME [runs=DIR|[DIR,...]]``: ours beside a paper's published numbers.

A table is data in ``ctxbench/report/papers/<NAME>.yaml``: its source (paper, arXiv id, table number,
backbone), how its metric names map to ours, how its category labels map to the dataset's category
ids and our names (a category may name its own metric for a label, ``ours: {F1: f1_adv_answer}``,
where the paper scored it against another reference), and one entry per row ("cell") with the
published values and the ``conf/experiment/<cell experiment>.yaml`` that reproduces it. Our numbers are found in run folders
whose recorded config has ``experiment.name`` equal to that cell's experiment (the newest run wins).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .markdown import MISSING, fmt, md_table
from .runs import ReportError, Run, find_runs

PAPERS_DIR = Path(__file__).resolve().parent / "papers"
TRAIN_METRICS = ("eval_loss", "eval_ppl", "final_loss")


def table_names() -> list[str]:
    return sorted(p.stem for p in PAPERS_DIR.glob("*.yaml"))


def load_table(name: str) -> dict[str, Any]:
    path = PAPERS_DIR / f"{name}.yaml"
    if not path.exists():
        from ..registry import suggest

        names = table_names()
        raise ReportError(f"unknown table {name!r}.{suggest(name, names)}")
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    for key in ("name", "source", "metrics", "categories", "cells"):
        if key not in data:
            raise ReportError(f"{path}: missing required key {key!r}")
    for i, cell in enumerate(data["cells"]):
        if "cell" not in cell:
            raise ReportError(f"{path}: cells[{i}] has no 'cell' key")
    return data


def _created(run: Run) -> str:
    created = (run.results or {}).get("created")
    if created:
        return str(created)
    try:
        return f"{run.path.stat().st_mtime:020.3f}"
    except OSError:
        return ""


def runs_by_experiment(roots: list[Path]) -> dict[str, Run]:
    """Newest run per ``experiment.name`` found below ``roots``."""
    best: dict[str, Run] = {}
    for run in find_runs([r for r in roots if r.exists()]):
        name = run.experiment().get("name")
        if not name or run.kind == "unknown":
            continue
        if name not in best or _created(run) > _created(best[name]):
            best[name] = run
    return best


def category_row(run: Run, category: dict[str, Any]) -> dict[str, Any] | None:
    """The run's results.json row for a table category: ``overall``, by our name, else by dataset id."""
    if run.results is None:
        return None
    name = category.get("name", "overall")
    if name == "overall":
        return run.results.get("overall")
    by_cat = run.results.get("by_category") or {}
    if name in by_cat:
        return by_cat[name]
    return next((r for r in by_cat.values() if str(r.get("id")) == str(category.get("id"))), None)


def our_value(run: Run, category: dict[str, Any], metric: str, scale: float) -> float | None:
    """Our number for one (category, metric): results.json ``by_category`` / ``overall``, or train losses."""
    if metric in TRAIN_METRICS:
        v = run.train.get(metric)
        return None if v is None else float(v)
    row = category_row(run, category)
    if not row or row.get(metric) is None:
        return None
    return float(row[metric]) * scale


def our_stderr(run: Run, category: dict[str, Any], metric: str, scale: float) -> float | None:
    """The bootstrap stderr beside our number (results.json ``<metric>_stderr``); None when not recorded."""
    if metric in TRAIN_METRICS:
        return None
    se = (category_row(run, category) or {}).get(f"{metric}_stderr")
    return None if se is None else float(se) * scale


def compare(table: dict[str, Any], runs: dict[str, Run]) -> list[dict[str, Any]]:
    """One record per (cell, category, metric): paper, ours, difference (ours − paper)."""
    scale = 100.0 if table.get("units", "percent") == "percent" else 1.0
    out = []
    for cell in table["cells"]:
        run = runs.get(cell.get("experiment") or "")
        values = cell.get("values") or {}
        for cat in table["categories"]:
            for label, spec in table["metrics"].items():
                ours_key = (cat.get("ours") or {}).get(label) or (spec["ours"] if isinstance(spec, dict) else spec)
                paper = (values.get(cat["paper"]) or {}).get(label)
                unit = 1.0 if ours_key in TRAIN_METRICS else scale
                ours = None if run is None else our_value(run, cat, ours_key, unit)
                se = None if run is None or ours is None else our_stderr(run, cat, ours_key, unit)
                n = None if run is None else (category_row(run, cat) or {}).get("n")
                diff = None if ours is None or not isinstance(paper, (int, float)) else ours - float(paper)
                out.append({"cell": cell["cell"], "label": cell.get("label", cell["cell"]),
                            "experiment": cell.get("experiment"), "run": None if run is None else str(run.path),
                            "scale": None if run is None else run.experiment().get("scale"),
                            "category": cat["paper"], "id": cat.get("id"), "name": cat.get("name"), "n": n,
                            "metric": label, "paper": paper, "ours": ours, "ours_stderr": se, "diff": diff})
    return out


def render(table: dict[str, Any], records: list[dict[str, Any]]) -> str:
    src = table["source"]
    metrics = list(table["metrics"])
    lines = [f"# {table.get('title', table['name'])}", "",
             f"Source: {src.get('paper')} (arXiv {src.get('arxiv')}), {src.get('table')}; "
             f"backbone {src.get('backbone')}.",
             f"Metrics: " + "; ".join(f"{k} = our `{(v['ours'] if isinstance(v, dict) else v)}`"
                                     for k, v in table["metrics"].items())
             + (" (ours ×100)" if table.get("units", "percent") == "percent" else "") + ".",
             "Each cell: paper / ours [± bootstrap stderr] / Δ (ours − paper); — = no number (no run, or not "
             "published).", ""]
    for cell in table["cells"]:
        recs = [r for r in records if r["cell"] == cell["cell"]]
        run = next((r["run"] for r in recs if r["run"]), None)
        scale = next((r["scale"] for r in recs if r["scale"]), None)
        where = (f"run `{run}`" + (f" (scale={scale})" if scale else "")) if run else \
            ("no run found" if cell.get("experiment") else "not implemented in ctxbench")
        exp = f"`experiment={cell['experiment']}`" if cell.get("experiment") else "no experiment config"
        lines += [f"## {cell.get('label', cell['cell'])} — {exp}; {where}", ""]
        header = ["category", "id", "n"] + [f"{m} paper / ours / Δ" for m in metrics]
        rows = []
        for cat in table["categories"]:
            row: list[Any] = [cat["paper"] + (f" ({cat['name']})" if cat.get("name") and
                                              cat["name"] != cat["paper"].lower().replace(" ", "-") else ""),
                              cat.get("id", ""), None]
            for m in metrics:
                r = next(x for x in recs if x["category"] == cat["paper"] and x["metric"] == m)
                row[2] = r["n"] if r["n"] is not None else row[2]
                diff = MISSING if r["diff"] is None else f"{r['diff']:+.2f}"
                se = "" if r.get("ours_stderr") is None else f" ± {r['ours_stderr']:.2f}"
                row.append(f"{fmt(r['paper'], 2)} / {fmt(r['ours'], 2)}{se} / {diff}")
            rows.append(row)
        lines += [md_table(header, rows, digits=2), ""]
    if table.get("notes"):
        lines += ["Notes:", "", str(table["notes"]).strip(), ""]
    return "\n".join(lines)


def table_report(name: str, roots: list[Path], out: Path | None = None) -> dict[str, Any]:
    table = load_table(name)
    runs = runs_by_experiment(roots)
    records = compare(table, runs)
    md = render(table, records)
    out = out or Path("outputs") / "report" / f"{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md, encoding="utf-8")
    (out.with_suffix(".json")).write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return {"markdown": md, "path": out, "records": records, "found": sorted(runs)}
