"""``python -m ctxbench report table=NAME [runs=DIR|[DIR,...]]``: ours beside a paper's published numbers.

A table is data in ``ctxbench/report/papers/<NAME>.yaml``: its source (paper, arXiv id, table number,
backbone), how its metric names map to ours, how its category labels map to the dataset's category
ids and our names (a category may name its own metric for a label, ``ours: {F1: f1_adv_answer}``,
where the paper scored it against another reference), and one entry per row ("cell") with the
published values and the ``conf/experiment/<cell experiment>.yaml`` that reproduces it. Our numbers are found in run folders
whose recorded config has ``experiment.name`` equal to that cell's experiment (the newest run wins).

A metric maps to ours as ``ours: <results.json metric>`` (read per category) or, for the ``overall``
category, as a dotted path into results.json (``ours: cost.latency_s.answer.p50``); ``units``
(percent | seconds | tokens; default the table's) says whether ours is ×100, ``digits`` how it prints.
``ours: null`` with ``not_comparable: <why>`` is a published number ctxbench does not measure; a cell
with ``not_comparable: <why>`` is a row whose setting ctxbench cannot run as published. Both print
"not comparable" where our number would be. A cell without an experiment prints ``no_experiment``
(why there is none yet), else "not implemented in ctxbench". ``<metric>_std`` beside a published value is the paper's
spread (J: std over 10 judge runs), printed as ``paper ± std``; ours prints with its bootstrap stderr
and, for a metric judged in several runs, its std over the runs (results.json ``<metric>_std``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxbench.report.guards import table_marks
from ctxbench.report.markdown import MISSING, fmt, md_table
from ctxbench.report.runs import ReportError, Run, config_value, created, find_runs

PAPERS_DIR = Path(__file__).resolve().parent / "papers"
TRAIN_METRICS = ("eval_loss", "eval_ppl", "final_loss")
TRAIN_LOSSES = TRAIN_METRICS  # never in a paper's column: load_table refuses a table that maps a metric to one


def table_names(kind: str | None = "paper") -> list[str]:
    """The tables ``report table=NAME`` knows: paper tables (default), boards (``kind="board"``), or all (None)."""
    names = sorted(p.stem for p in PAPERS_DIR.glob("*.yaml"))
    return names if kind is None else [n for n in names if table_kind(n) == kind]


def read_yaml(name: str) -> dict[str, Any]:
    """``ctxbench/report/papers/<name>.yaml`` as a dict; an unknown name is refused with the nearest ones."""
    path = PAPERS_DIR / f"{name}.yaml"
    if not path.exists():
        from ctxbench.core.registry import suggest

        names = table_names(None)
        raise ReportError(f"unknown table {name!r}.{suggest(name, names)}")
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def table_kind(name: str) -> str:
    """``paper`` (ours beside published cells), ``board`` (systems side by side, :mod:`.board`),
    ``ruler`` (methods × compression ratios on RULER, :mod:`.ruler`) or ``longmemeval`` (published
    LongMemEval rows beside our runs, :mod:`.longmemeval`)."""
    return str(read_yaml(name).get("kind", "paper"))


def load_table(name: str) -> dict[str, Any]:
    path = PAPERS_DIR / f"{name}.yaml"
    data = read_yaml(name)
    for key in ("name", "source", "metrics", "categories", "cells"):
        if key not in data:
            raise ReportError(f"{path}: missing required key {key!r}")
    for i, cell in enumerate(data["cells"]):
        if "cell" not in cell:
            raise ReportError(f"{path}: cells[{i}] has no 'cell' key")
    for label, spec in data["metrics"].items():
        if metric_spec(spec).get("ours") in TRAIN_LOSSES:
            raise ReportError(f"{path}: metric {label!r} reads our training loss {metric_spec(spec)['ours']!r}, a "
                              "quantity no paper reports: measure what the paper measured (eval task=..., "
                              "ctxbench/evaluation/tasks/)")
    return data



def runs_by_experiment(roots: list[Path]) -> dict[str, Run]:
    """Newest run per ``experiment.name`` found below ``roots``."""
    best: dict[str, Run] = {}
    for run in find_runs([r for r in roots if r.exists()]):
        name = run.experiment().get("name")
        if not name or run.kind == "unknown":
            continue
        if name not in best or created(run) > created(best[name]):
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


def results_path(run: Run, dotted: str) -> float | None:
    """A number anywhere in results.json by dotted path (``cost.latency_s.answer.p50``); None if absent."""
    node: Any = run.results
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def task_row(run: Run, cell: dict[str, Any]) -> dict[str, Any] | None:
    """The row of a task run (``eval task=perplexity|reconstruction|choice``: results.json ``rows``)
    that a cell reads: every key of the cell's ``row`` selector matches; ``system: method`` is the
    run's own method (``full_context`` / ``no_context`` are its baselines)."""
    if run.results is None or not isinstance(run.results.get("rows"), list):
        return None
    want = dict(cell.get("row") or {})
    if want.get("system") == "method":
        want["system"] = ((run.results.get("config") or {}).get("method") or {}).get("name")
    return next((r for r in run.results["rows"] if isinstance(r, dict)
                 and all(str(r.get(k)) == str(v) for k, v in want.items())), None)


def setting_differs(table: dict[str, Any], cell: dict[str, Any], run: Run | None) -> str | None:
    """Why our run's setting is not the paper's: the table's and the cell's ``setting`` (dotted config
    keys → the paper's value, e.g. ``model.name: llama2_7b``) compared with the run's recorded config."""
    if run is None:
        return None
    setting = {**(table.get("setting") or {}), **(cell.get("setting") or {})}
    diffs = [f"{shown(run.config, k)} (paper {v!r})" for k, v in setting.items()
             if str(config_value(run.config, k)) != str(v)]
    return "ours " + ", ".join(diffs) if diffs else None


def shown(config: Any, key: str) -> str:
    """``key=value`` of a run's config; an unset ``*.label`` shows its group's ``name`` instead
    (``model.label=None`` says nothing; ``model.name='smollm2_135m'`` says which model ran)."""
    value = config_value(config, key)
    if value is None and key.endswith(".label"):
        name_key = key[: -len("label")] + "name"
        name = config_value(config, name_key)
        if name is not None:
            return f"{name_key}={name!r}"
    return f"{key}={value!r}"


def our_value(run: Run, category: dict[str, Any], metric: str, scale: float,
              cell: dict[str, Any] | None = None) -> float | None:
    """Our number for one (category, metric): a task run's selected row (cell ``row``), results.json
    ``by_category`` / ``overall``, a dotted results.json path (overall only), or train losses."""
    if cell is not None and cell.get("row") is not None:
        row = task_row(run, cell)
        v = None if row is None else row.get(metric)
        return None if not isinstance(v, (int, float)) or isinstance(v, bool) else float(v) * scale
    if metric in TRAIN_METRICS:
        v = run.train.get(metric)
        return None if v is None else float(v)
    if "." in metric:
        if category.get("name", "overall") != "overall":
            return None
        v = results_path(run, metric)
        return None if v is None else v * scale
    row = category_row(run, category)
    if not row or row.get(metric) is None:
        return None
    return float(row[metric]) * scale


def our_stderr(run: Run, category: dict[str, Any], metric: str, scale: float,
               cell: dict[str, Any] | None = None) -> float | None:
    """The bootstrap stderr beside our number (results.json ``<metric>_stderr``); None when not recorded."""
    if cell is not None and cell.get("row") is not None:
        se = (task_row(run, cell) or {}).get(f"{metric}_stderr")
        return None if se is None else float(se) * scale
    if metric in TRAIN_METRICS or "." in metric:
        return None
    se = (category_row(run, category) or {}).get(f"{metric}_stderr")
    return None if se is None else float(se) * scale


def our_run_std(run: Run, category: dict[str, Any], metric: str, scale: float) -> float | None:
    """Our std over judge runs (results.json ``<metric>_std``); None when judged once or not recorded."""
    if metric in TRAIN_METRICS or "." in metric:
        return None
    sd = (category_row(run, category) or {}).get(f"{metric}_std")
    return None if not isinstance(sd, (int, float)) else float(sd) * scale


def metric_spec(spec: Any) -> dict[str, Any]:
    """A table's metric entry as a dict (``F1: f1_set`` is ``{"ours": "f1_set"}``)."""
    return dict(spec) if isinstance(spec, dict) else {"ours": spec}


def metric_scale(table: dict[str, Any], spec: dict[str, Any]) -> float:
    """×100 for a percent metric (the table's units unless the metric says), 1 for anything else."""
    if spec.get("ours") in TRAIN_METRICS:
        return 1.0
    return 100.0 if spec.get("units", table.get("units", "percent")) == "percent" else 1.0


def not_comparable(cell: dict[str, Any], spec: dict[str, Any]) -> str | None:
    """Why our number cannot stand beside the paper's (the cell's setting, or a metric we lack), else None."""
    if cell.get("not_comparable"):
        return str(cell["not_comparable"])
    if spec.get("ours") is None:
        return str(spec.get("not_comparable") or "ctxbench does not measure it")
    return None


def compare(table: dict[str, Any], runs: dict[str, Run]) -> list[dict[str, Any]]:
    """One record per (cell, category, metric): paper, ours, difference (ours − paper)."""
    out = []
    for cell in table["cells"]:
        run = runs.get(cell.get("experiment") or "")
        values = cell.get("values") or {}
        for cat in table["categories"]:
            for label, raw in table["metrics"].items():
                spec = metric_spec(raw)
                # a category may name its own metric for a label (scored against another reference)
                ours_key = (cat.get("ours") or {}).get(label) or spec.get("ours")
                unit, why = metric_scale(table, spec), not_comparable(cell, spec)
                published = values.get(cat["paper"]) or {}
                paper = published.get(label)
                live = run is not None and why is None
                ours = our_value(run, cat, ours_key, unit, cell) if live else None
                se = our_stderr(run, cat, ours_key, unit, cell) if live and ours is not None else None
                sd = our_run_std(run, cat, ours_key, unit) if live and ours is not None else None
                if cell.get("row") is not None:
                    n = None if run is None else (task_row(run, cell) or {}).get("n")
                else:
                    n = None if run is None else (category_row(run, cat) or {}).get("n")
                why = why or (setting_differs(table, cell, run) if ours is not None else None)
                diff = None if ours is None or why or not isinstance(paper, (int, float)) else ours - float(paper)
                out.append({"cell": cell["cell"], "label": cell.get("label", cell["cell"]),
                            "experiment": cell.get("experiment"), "run": None if run is None else str(run.path),
                            "scale": None if run is None else run.experiment().get("scale"),
                            "category": cat["paper"], "id": cat.get("id"), "name": cat.get("name"), "n": n,
                            "metric": label, "paper": paper, "paper_std": published.get(f"{label}_std"),
                            "ours": ours, "ours_stderr": se, "ours_std": sd, "diff": diff,
                            "comparable": why is None, "not_comparable": why})
    return out


def cell_text(r: dict[str, Any], digits: int = 2) -> str:
    """``paper [± std] / ours [± stderr] [(std s over runs)] / Δ``, or ``paper / not comparable``."""
    paper = fmt(r["paper"], digits) + ("" if r.get("paper_std") is None else f" ± {r['paper_std']:.2f}")
    if not r.get("comparable", True):
        if r.get("ours") is None:
            return f"{paper} / not comparable"
        se = "" if r.get("ours_stderr") is None else f" ± {r['ours_stderr']:.{digits}f}"
        return f"{paper} / {fmt(r['ours'], digits)}{se} / not comparable"  # another setting: no Δ
    diff = MISSING if r["diff"] is None else f"{r['diff']:+.{digits}f}"
    se = "" if r.get("ours_stderr") is None else f" ± {r['ours_stderr']:.{digits}f}"
    sd = "" if r.get("ours_std") is None else f" (std {r['ours_std']:.2f} over runs)"
    return f"{paper} / {fmt(r['ours'], digits)}{se}{sd} / {diff}"


def render(table: dict[str, Any], records: list[dict[str, Any]]) -> str:
    src = table["source"]
    metrics = list(table["metrics"])
    lines = [f"# {table.get('title', table['name'])}", "",
             f"Source: {src.get('paper')} (arXiv {src.get('arxiv')}), {src.get('table')}; "
             f"backbone {src.get('backbone')}.",
             "Metrics: " + "; ".join(_metric_line(k, metric_spec(v), table) for k, v in table["metrics"].items())
             + (" (ours ×100)" if table.get("units", "percent") == "percent" else "") + ".",
             "Each cell: paper [± std] / ours [± bootstrap stderr] / Δ (ours − paper); — = no number (no run, or "
             "not published); not comparable = a number ctxbench does not measure, a setting it cannot run, or a run "
             "in another setting than the paper's (ours shown, no Δ). A heading's guards: why our run's number may "
             "not measure a memory (health warnings, a lenient judge, an answer prompt other than the other "
             "rows'; ctxbench/report/guards.py).", ""]
    for cell in table["cells"]:
        recs = [r for r in records if r["cell"] == cell["cell"]]
        run = next((r["run"] for r in recs if r["run"]), None)
        scale = next((r["scale"] for r in recs if r["scale"]), None)
        where = (f"run `{run}`" + (f" (scale={scale})" if scale else "")) if run else \
            ("no run found" if cell.get("experiment") else str(cell.get("no_experiment") or "not implemented in ctxbench"))
        if cell.get("not_comparable"):
            where = f"not comparable: {cell['not_comparable']}"
        differs = next((r["not_comparable"] for r in recs if r.get("ours") is not None and not r["comparable"]), None)
        if differs and not cell.get("not_comparable"):
            where += f"; not comparable: {differs}"
        guards = next((r["guards"] for r in recs if r.get("guards")), None)
        if guards:
            where += "; guards: " + "; ".join(guards)
        exp = f"`experiment={cell['experiment']}`" if cell.get("experiment") else "no experiment config"
        if cell.get("trained_by"):
            exp = f"`train experiment={cell['trained_by']}` then `eval {exp[1:-1]} checkpoint=<run>`"
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
                row.append(cell_text(r, int(metric_spec(table["metrics"][m]).get("digits", 2))))
            rows.append(row)
        lines += [md_table(header, rows, digits=2), ""]
    if table.get("notes"):
        lines += ["Notes:", "", str(table["notes"]).strip(), ""]
    return "\n".join(lines)


def _metric_line(label: str, spec: dict[str, Any], table: dict[str, Any]) -> str:
    if spec.get("ours") is None:
        return f"{label} = not measured by ctxbench"
    unit = spec.get("units")
    return f"{label} = our `{spec['ours']}`" + (f" ({unit})" if unit and unit != table.get("units") else "")


def add_guards(table: dict[str, Any], runs: dict[str, Run], records: list[dict[str, Any]]) -> None:
    """Each record's ``guards``: its cell's run's marks (:mod:`.guards`: health warnings, lenient judges,
    an answer prompt other than the other cells' runs')."""
    by_cell = {c["cell"]: runs.get(c.get("experiment") or "") for c in table["cells"]}
    marks = table_marks({cell: (run.results if run is not None else None) for cell, run in by_cell.items()})
    for r in records:
        r["guards"] = marks.get(r["cell"], [])


def table_report(name: str, roots: list[Path], out: Path | None = None,
                 add_unmatched: bool | None = None) -> dict[str, Any]:
    out = out or Path("outputs") / "report" / f"{name}.md"
    if table_kind(name) == "ruler":  # every RULER run found, by method x compression ratio (ruler.py)
        from ctxbench.report.ruler import ruler_report

        result = ruler_report(read_yaml(name), roots, out)
        return {**result, "found": sorted({r["method"] for r in result["records"]}), "found_label": "methods found"}
    if table_kind(name) == "longmemeval":  # published LongMemEval numbers beside every LongMemEval run (longmemeval.py)
        from ctxbench.report.longmemeval import longmemeval_report

        result = longmemeval_report(read_yaml(name), roots, out, str(PAPERS_DIR / f"{name}.yaml"))
        return {**result, "found": [r["row"] for r in result["records"] if r["kind"] == "ours"],
                "found_label": "LongMemEval runs found"}
    if table_kind(name) == "board":  # many systems on the same questions, no published values (board.py)
        from ctxbench.report.board import run_board

        return run_board(name, roots, out, add_unmatched)
    runs = runs_by_experiment(roots)
    table = load_table(name)
    records = compare(table, runs)
    add_guards(table, runs, records)
    md = render(table, records)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md, encoding="utf-8")
    (out.with_suffix(".json")).write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return {"markdown": md, "path": out, "records": records, "found": sorted(runs)}
