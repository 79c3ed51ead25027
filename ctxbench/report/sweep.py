"""``python -m ctxbench report sweep=DIR``: one table and one plot for a Hydra multirun folder.

Each job folder's swept values come from its ``.hydra/overrides.yaml`` (the keys whose values differ
between jobs); its numbers from ``results.json`` (eval: the ``overall`` metrics) or the training logs
(train: final eval loss, last loss). Writes ``DIR/sweep.md`` and ``DIR/sweep.png``.

A sweep over a loss weight (ICAE's λ: loss = λ·L_AE + (1−λ)·L_LM) plots the loss parts (``ae_loss``,
``lm_loss``) side by side instead of ``eval_loss``, which is weighted by the swept λ itself.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ctxbench.report.markdown import md_table
from ctxbench.report.runs import ReportError, Run, find_runs

EVAL_DEFAULT, TRAIN_DEFAULT = "f1", "eval_loss"
TRAIN_COLUMNS = ["step", "final_loss", "eval_loss", "eval_ppl"]  # then a method's loss parts (ae_loss, ...)
WEIGHT_KEYS = {"method.lambda_ae": ("ae_loss", "lm_loss")}  # swept loss weight → the parts it weights


def _job_order(run: Run, root: Path) -> tuple[int, str]:
    rel = run.path.relative_to(root).as_posix() if run.path != root else ""
    m = re.match(r"(\d+)_?", run.path.name)
    return (int(m.group(1)) if m else 10**9, rel)


def _as_number(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def swept_keys(runs: list[Run]) -> tuple[list[str], dict[str, str]]:
    """(keys whose values differ across jobs, in override order; the keys every job shares → value)."""
    maps = [r.override_map() for r in runs]
    order: list[str] = []
    for m in maps:
        order += [k for k in m if k not in order]
    swept = [k for k in order if len({m.get(k) for m in maps}) > 1]
    fixed = {k: maps[0][k] for k in order if k not in swept and k in maps[0]}
    return swept, fixed


def metric_columns(runs: list[Run]) -> list[str]:
    kinds = {r.kind for r in runs}
    cols: list[str] = []
    if "eval" in kinds:
        for r in runs:
            cols += [k for k in r.scalar_metrics() if k not in cols]
    if "train" in kinds:
        cols += [c for c in TRAIN_COLUMNS if c not in cols and any(c in r.train for r in runs)]
        for r in runs:
            cols += [k for k in r.train if k not in cols]
    return cols


def pick_metric(runs: list[Run], wanted: str | None) -> str:
    cols = metric_columns(runs)
    if wanted:
        if wanted not in cols:
            raise ReportError(f"metric {wanted!r} is not in these runs; they have: {', '.join(cols) or 'nothing'}")
        return wanted
    for c in (EVAL_DEFAULT, TRAIN_DEFAULT, "final_loss"):
        if c in cols:
            return c
    if not cols:
        raise ReportError("the runs recorded no metrics (no results.json, no metrics.jsonl)")
    return cols[0]


def weighted_parts(swept: list[str], cols: list[str]) -> tuple[str | None, list[str]]:
    """(swept weight key, the loss parts it weights) when eval_loss is not comparable across jobs, else (None, [])."""
    for key in swept:
        parts = WEIGHT_KEYS.get(key)
        if parts and all(p in cols for p in parts):
            return key, list(parts)
    return None, []


def sweep_report(sweep_dir: str | Path, metric: str | None = None, plot: bool = True) -> dict[str, Any]:
    """Collect a multirun folder into ``sweep.md`` (+ ``sweep.png``); returns the rows and paths."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise ReportError(f"sweep={root}: no such folder")
    skipped: list[str] = []
    runs = [r for r in find_runs([root], skipped) if r.kind != "unknown"]
    if not runs:
        why = f"; skipped {len(skipped)} broken: {skipped[0]}" if skipped else ""
        raise ReportError(f"sweep={root}: no finished jobs (no results.json or metrics.jsonl below it){why}")
    runs.sort(key=lambda r: _job_order(r, root))
    swept, fixed = swept_keys(runs)
    cols = metric_columns(runs)
    chosen = pick_metric(runs, metric)
    weight, parts = weighted_parts(swept, cols) if metric is None else (None, [])
    plotted = parts or [chosen]
    chosen = plotted[0]
    rows = []
    for r in runs:
        ov = r.override_map()
        nums = r.scalar_metrics()
        rel = r.path.relative_to(root).as_posix() or "."
        m = re.match(r"(\d+)_", r.path.name)
        rows.append({"job": m.group(1) if m and r.path.parent == root else rel, "kind": r.kind,
                     **{k: ov.get(k) for k in swept}, **{c: nums.get(c) for c in cols}})
    header = ["job", *swept, *cols]
    table = md_table(header, [[row.get(h) for h in header] for row in rows])
    lines = [f"# Sweep: {root}", "", f"{len(rows)} jobs; swept: {', '.join(swept) or '(nothing differs)'}; "
             f"plotted metric: {', '.join(f'`{c}`' for c in plotted)}", ""]
    if weight:
        lines += [f"`eval_loss` weights {' and '.join(f'`{p}`' for p in parts)} by the swept `{weight}`, so it is not "
                  "compared across jobs; plotted are the parts themselves (last logged training step).", ""]
    if "train" in {r.kind for r in runs}:
        lines += ["Train runs: `final_loss` and a method's loss parts (`ae_loss`, `lm_loss`, ...) are the last "
                  "logged training step; `eval_loss` is the final held-out evaluation (`eval_ppl` = exp of it).", ""]
    if fixed:
        lines += ["Shared overrides: " + " ".join(f"`{k}={v}`" for k, v in fixed.items()), ""]
    lines += [table, ""]
    md = "\n".join(lines)
    md_path = root / "sweep.md"
    md_path.write_text(md, encoding="utf-8")
    png_path = None
    if plot:
        png_path = root / "sweep.png"
        xs = sorted(swept, key=lambda k: k != weight)  # the weight (λ) on the x axis
        plot_sweep(rows, xs, plotted, png_path)
        md_path.write_text(md + f"\n![{', '.join(plotted)}](sweep.png)\n", encoding="utf-8")
    return {"rows": rows, "swept": swept, "fixed": fixed, "metric": chosen, "plotted": plotted, "markdown": md,
            "md_path": md_path, "png_path": png_path}


def plot_sweep(rows: list[dict[str, Any]], swept: list[str], metrics: str | list[str], path: Path,
               title: str = "") -> None:
    """Each metric (one panel each) vs the first swept key; one line per combination of the other swept keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    xkey = swept[0] if swept else "job"
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), dpi=100, squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        _plot_panel(ax, rows, swept, xkey, metric, title or f"{metric} vs {xkey}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_panel(ax: Any, rows: list[dict[str, Any]], swept: list[str], xkey: str, metric: str, title: str) -> None:
    xs_raw = [str(r.get(xkey)) for r in rows]
    numeric = all(_as_number(x) is not None for x in xs_raw)
    categories = list(dict.fromkeys(xs_raw))
    groups: dict[str, list[tuple[float, float]]] = {}
    for r, xr in zip(rows, xs_raw):
        y = r.get(metric)
        if not isinstance(y, (int, float)):
            continue
        x = _as_number(xr) if numeric else float(categories.index(xr))
        label = ", ".join(f"{k}={r.get(k)}" for k in swept[1:]) or metric
        groups.setdefault(label, []).append((x, float(y)))
    for label, pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if not numeric:
        ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
    ax.set_xlabel(xkey)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(groups) > 1 or swept[1:]:
        ax.legend(fontsize=8)


def print_summary(result: dict[str, Any]) -> None:
    print(result["markdown"])
    print(f"report: wrote {result['md_path']}" + (f" and {result['png_path']}" if result["png_path"] else ""))


__all__ = ["sweep_report", "plot_sweep", "swept_keys", "print_summary"]
