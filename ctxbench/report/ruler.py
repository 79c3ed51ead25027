"""``python -m ctxbench report table=ruler [runs=DIR]``: RULER under the kvpress protocol, every method.

The table's YAML (``ctxbench/report/papers/ruler.yaml``, ``kind: ruler``) names the cells ``reproduce``
runs; the report itself reads whatever RULER runs it finds below ``runs=`` (results.json ``dataset``
``ruler``): the runs of ``eval task=compression dataset=ruler ...`` at several ``task.ratio`` values and
methods. Each run is one (method, compression ratio, query-aware?) point; the newest run of a point
wins (by results.json ``created``). The method is results.json ``system``, ``kvpress:<press>`` for
``method=kvpress`` (the press from the run's config ``method.press``), with ``(query-aware)`` added when
the question was in the window as the method compressed and then asked empty (kvpress's
``compress_questions``: results.json ``protocol.asked`` = ``empty``), and ``(query-aware, asked again)``
when the question was asked again after it (``task.ask_again=true``, or a query-aware run written before
issue 54, which has no ``asked``): not kvpress's mode, so its CSV ``query_aware`` is ``asked_again``, not
True. The ratio and the mode come from results.json
``protocol`` (``eval task=compression`` writes it); a RULER run without that block counts as ratio 0
when its system keeps the whole context (``full_cache`` / ``full_context``: nothing to compress), and
is refused in one line naming its folder otherwise (its ratio is unknown).

Numbers are percent, as kvpress reports RULER (``string_match`` ×100): per task the run's
``by_category`` ``ruler_match`` (category = the RULER task: the row's ``id``) ± its bootstrap stderr; per run the mean
over tasks (kvpress's leaderboard averages over tasks) ± sqrt(sum of the tasks' stderr²) / tasks (the
tasks' questions are independent). Beside each point, what the reader held per question (results.json
``cost.held_per_question``: text tokens + KV slots + soft slots, and KV bytes) and the mean budget the
method was given (the records' ``usage.extra.budget``), so families compare at the same holding.

Writes ``<out>.md`` (average per method × ratio, then per task × ratio × method), ``<out>.json`` (the
records), ``<out>.png`` (mean accuracy against compression ratio, one line per method with SE bars,
the figure of kvpress's README; beside it, accuracy against held context) and
``ruler_kvpress_rows.csv`` beside them: one row per run in the columns of kvpress's evaluation
(``evaluation/evaluate.py``'s config.yaml: dataset, data_dir = context length, model, press_name,
compression_ratio, query_aware; its metrics.json: one ``string_match`` per task; ``score`` = their
mean, as its leaderboard averages), then ctxbench's own columns.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from ctxbench.data.categories import canonical_name
from ctxbench.report.markdown import MISSING, md_table
from ctxbench.report.runs import ReportError, Run, find_runs

METRIC = "ruler_match"
#: the metrics a RULER run may be scored with, by preference, and the reading each names (metrics/ruler.py)
METRICS = {"ruler_match": "RULER's string_match_all (its postprocess_pred: control characters → newline)",
           "ruler_match_kvpress": "kvpress's string_match_all (its calculate_metrics: control characters removed)"}
#: RULER's task names in its own order (NVIDIA/RULER; kvpress's 4k leaderboard runs all 13)
TASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
         "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2")
#: systems that keep the whole context: a run of theirs without a protocol block is ratio 0
WHOLE_CONTEXT = ("full_cache", "full_context")
#: ctxbench's kvpress alias → kvpress's own press_name (evaluate_registry.py), for the CSV
KVPRESS_NAME = {"streamingllm": "streaming_llm"}
CSV_NAME = "ruler_kvpress_rows.csv"
KVPRESS_COLUMNS = ("dataset", "data_dir", "model", "press_name", "compression_ratio", "query_aware")
OWN_COLUMNS = ("ctxbench_method", "source", "metric", "n", "held_per_question", "held_text", "held_kv_slots",
               "held_soft_slots", "kv_bytes_per_question", "budget_per_question", "run")


def is_ruler(run: Run) -> bool:
    res = run.results or {}
    return str(res.get("dataset") or (run.config.get("dataset") or {}).get("name")) == "ruler"


ASKED_AGAIN = "asked_again"  # the query-aware mode that is not kvpress's (the question asked again)


def protocol_of(run: Run) -> tuple[float, bool | str]:
    """(compression ratio, query-aware: False, True (kvpress's compress_questions) or ``asked_again``) from
    results.json ``protocol``; a whole-context run without one is ratio 0, any other is refused (one line
    naming the folder)."""
    proto = (run.results or {}).get("protocol")
    if isinstance(proto, dict) and isinstance(proto.get("ratio"), (int, float)):
        if not proto.get("query_aware"):
            return float(proto["ratio"]), False
        return float(proto["ratio"]), True if proto.get("asked") == "empty" else ASKED_AGAIN
    if (run.results or {}).get("system") in WHOLE_CONTEXT:
        return 0.0, False
    raise ReportError(f"{run.path}: a RULER run without results.json protocol (eval task=compression task.ratio=R "
                      f"writes it), so its compression ratio is unknown; only a {'/'.join(WHOLE_CONTEXT)} run "
                      "counts as ratio 0")


def method_of(run: Run) -> tuple[str, str, str]:
    """(label, kvpress-style press_name, source): ``kvpress:<press>`` for the kvpress adapter."""
    system = str((run.results or {}).get("system") or "?")
    if system.split("=", 1)[-1] == "kvpress":  # results.json writes ``method=kvpress``
        press = str(((run.config.get("method") or {}).get("press")) or "?")
        return f"kvpress:{press}", KVPRESS_NAME.get(press, press), "kvpress"
    return system, system, "ctxbench"


def model_of(run: Run) -> str:
    """A hub id (``model.path`` of ``model=hf``) as kvpress names models, else the model config's name."""
    model = run.config.get("model") or {}
    return str(model.get("path") if model.get("name") == "hf" and model.get("path") else model.get("name") or "?")


def task_name(category: str, row: dict[str, Any]) -> str:
    """RULER's task name of a by_category row: its ``id`` (the question's category, the task name), else
    the task whose canonical category name it is (results.json names ``niah_single_1`` ``niah-single-1``)."""
    if isinstance(row.get("id"), str) and row["id"]:
        return row["id"]
    return next((t for t in TASKS if canonical_name(t) == category), category)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pct(v: Any) -> float | None:
    return None if _num(v) is None else round(100.0 * float(v), 2)


def mean_budget(run: Run) -> float | None:
    """The mean ``usage.extra.budget`` of the run's answers (predictions.jsonl), None when not recorded."""
    path = run.path / "predictions.jsonl"
    if not path.is_file():
        return None
    budgets = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        b = _num(((rec.get("usage") or {}).get("extra") or {}).get("budget")) if isinstance(rec, dict) else None
        if b is not None:
            budgets.append(b)
    return round(sum(budgets) / len(budgets), 1) if budgets else None


def run_record(run: Run) -> dict[str, Any]:
    """One (method, ratio, mode) point: per task and average (percent, ± SE), held context, budget."""
    ratio, aware = protocol_of(run)
    label, press, source = method_of(run)
    res = run.results or {}
    cats = res.get("by_category") or {}
    metric = next((m for m in METRICS if any(_num(row.get(m)) is not None for row in cats.values())), METRIC)
    tasks = {}
    for name, row in cats.items():
        if _num(row.get(metric)) is None:
            continue
        tasks[task_name(name, row)] = {"score": _pct(row[metric]), "stderr": _pct(row.get(f"{metric}_stderr")),
                                       "n": row.get("n")}
    if not tasks:
        raise ReportError(f"{run.path}: results.json has no {METRIC} per task (by_category); score it with "
                          f"metrics=[{METRIC}]")
    scores = [t["score"] for t in tasks.values()]
    ses = [t["stderr"] for t in tasks.values()]
    held = ((res.get("cost") or {}).get("held_per_question")) or {}
    length = (run.config.get("dataset") or {}).get("length")
    mode = {False: "", True: " (query-aware)", ASKED_AGAIN: " (query-aware, asked again)"}[aware]
    return {"method": label + mode, "system": res.get("system"), "press_name": press,
            "source": source, "ratio": ratio, "query_aware": aware, "model": model_of(run), "length": length,
            "run": str(run.path), "created": res.get("created"), "n": (res.get("overall") or {}).get("n"),
            "metric": metric, "metric_version": ((res.get("metrics") or {}).get(metric) or {}).get("version"),
            "tasks": tasks, "average": round(sum(scores) / len(scores), 2),
            "average_stderr": None if any(s is None for s in ses)
            else round(math.sqrt(sum(s * s for s in ses)) / len(ses), 2),
            "held": {k: _num(held.get(k)) for k in ("total", "text", "kv_slots", "soft_slots", "kv_bytes")},
            "budget": mean_budget(run)}


def collect(roots: list[Path]) -> list[dict[str, Any]]:
    """The newest run of each (model, length, method, ratio) point among the RULER runs below ``roots``."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in find_runs([r for r in roots if r.exists()]):
        if run.kind != "eval" or not is_ruler(run):
            continue
        rec = run_record(run)
        key = (rec["model"], rec["length"], rec["method"], rec["ratio"])
        if key not in best or str(rec["created"] or "") > str(best[key]["created"] or ""):
            best[key] = rec
    return sorted(best.values(), key=lambda r: (str(r["model"]), str(r["length"]), _method_order(r), r["ratio"]))


def _method_order(r: dict[str, Any]) -> tuple[int, str]:
    return (0 if r["system"] in WHOLE_CONTEXT else 1, r["method"])


def task_order(records: list[dict[str, Any]]) -> list[str]:
    found = {t for r in records for t in r["tasks"]}
    return [t for t in TASKS if t in found] + sorted(found - set(TASKS))


def _se(v: float | None, se: float | None) -> str:
    return MISSING if v is None else f"{v:.1f}" + ("" if se is None else f" ± {se:.1f}")


def _held(r: dict[str, Any]) -> str:
    h = r["held"].get("total")
    return MISSING if h is None else f"{h:,.0f}"


def _ratio(v: float) -> str:
    return f"{v:g}"


def settings(records: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return list(dict.fromkeys((r["model"], r["length"]) for r in records))


def render(table: dict[str, Any], records: list[dict[str, Any]], png: str | None, csv_name: str | None) -> str:
    lines = [f"# {table.get('title', table['name'])}", ""]
    if table.get("description"):
        lines += [str(table["description"]).strip(), ""]
    if not records:
        return "\n".join(lines + ["No RULER runs found (results.json dataset `ruler`).", ""])
    for model, length in settings(records):
        recs = [r for r in records if (r["model"], r["length"]) == (model, length)]
        tasks = task_order(recs)
        ratios = sorted({r["ratio"] for r in recs})
        methods = list(dict.fromkeys(r["method"] for r in recs))
        where = f"model `{model}`, context {length if length is not None else '?'} tokens, {len(tasks)} tasks"
        lines += [f"## Average over tasks — {where}", ""]
        rows = []
        for m in methods:
            by_ratio = {r["ratio"]: r for r in recs if r["method"] == m}
            rows.append([m, *(_se(by_ratio[x]["average"], by_ratio[x]["average_stderr"]) if x in by_ratio else MISSING
                              for x in ratios)])
        lines += [md_table(["method", *(f"ratio {_ratio(x)}" for x in ratios)], rows, formatter=str), ""]
        lines += [f"## Per task — {where}", ""]
        rows = [[r["method"], _ratio(r["ratio"]), r["n"], _held(r),
                 MISSING if r["budget"] is None else f"{r['budget']:,.0f}",
                 *(_se(r["tasks"][t]["score"], r["tasks"][t]["stderr"]) if t in r["tasks"] else MISSING for t in tasks),
                 _se(r["average"], r["average_stderr"])] for r in recs]
        header = ["method", "ratio", "n", "held / q", "budget / q", *tasks, "average"]
        lines += [md_table(header, rows, formatter=str), ""]
    used = list(dict.fromkeys(r["metric"] for r in records))
    lines += ["Scores: " + "; ".join(f"`{m}` = {METRICS.get(m, m)}" for m in used) + ", ×100 (the share of "
              "expected strings found in the answer), as kvpress reports them; ± = bootstrap standard error over the task's questions; average = "
              "mean over the tasks (kvpress's leaderboard), ± sqrt(Σ SE²) / tasks. ratio = the share of the context "
              "the method removes (the reader may hold (1 − ratio) × the context's tokens, per example); "
              "query-aware "
              "= the question was in the window while the method compressed and then asked empty (kvpress's "
              "compress_questions); asked again = it was also asked after the compression (not kvpress's). held / q = what the reader held per "
              "question (text tokens + KV slots + soft slots, results.json cost.held_per_question); budget / q = the "
              "budget the method was given (its answers' usage.extra.budget). A run without a protocol block counts "
              f"as ratio 0 only for {' / '.join(WHOLE_CONTEXT)}."]
    if csv_name:
        lines += ["", f"kvpress-aligned rows (one per run, its columns first): `{csv_name}`."]
    if png:
        lines += ["", f"![mean accuracy against compression ratio]({png})"]
    return "\n".join(lines) + "\n"


def curves(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Label → its points by ratio; a method without its own ratio-0 point starts at the setting's whole
    context point (kvpress draws every press from the uncompressed score)."""
    out: dict[str, list[dict[str, Any]]] = {}
    many = len(settings(records)) > 1
    for model, length in settings(records):
        recs = [r for r in records if (r["model"], r["length"]) == (model, length)]
        base = next((r for r in recs if r["system"] in WHOLE_CONTEXT and r["ratio"] == 0), None)
        for m in dict.fromkeys(r["method"] for r in recs):
            pts = sorted((r for r in recs if r["method"] == m), key=lambda r: r["ratio"])
            if base is not None and pts[0]["ratio"] > 0:
                pts = [base] + pts
            out[m + (f" [{model}, {length}]" if many else "")] = pts
    return out


def plot(records: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), dpi=110)
    for label, pts in curves(records).items():
        whole = all(p["system"] in WHOLE_CONTEXT for p in pts)
        style = dict(marker="o", capsize=3, label=label, ls="--" if whole else "-")
        left.errorbar([p["ratio"] for p in pts], [p["average"] for p in pts],
                      yerr=[p["average_stderr"] or 0.0 for p in pts], **style)
        held = [p for p in pts if p["held"].get("total")]
        if held:
            right.errorbar([p["held"]["total"] for p in held], [p["average"] for p in held],
                           yerr=[p["average_stderr"] or 0.0 for p in held], **style)
    left.set_xlabel("compression ratio (share of the context removed)")
    left.set_ylabel("RULER score (mean over tasks, %)")
    left.set_title(title, fontsize=10)
    right.set_xscale("log")
    right.set_xlabel("held per question (text tokens + KV slots + soft slots, log)")
    right.set_ylabel("RULER score (mean over tasks, %)")
    right.set_title("the same points against what the reader held", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.set_ylim(-2, 102)
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def kvpress_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(header, rows) of ``ruler_kvpress_rows.csv``: kvpress's columns, each task's string_match, score, then ours."""
    tasks = task_order(records)
    header = [*KVPRESS_COLUMNS, *tasks, "score", *OWN_COLUMNS]
    rows = []
    for r in records:
        held = r["held"]
        rows.append({"dataset": "ruler", "data_dir": r["length"], "model": r["model"],
                     "press_name": "no_press" if r["system"] in WHOLE_CONTEXT else r["press_name"],
                     "compression_ratio": f"{r['ratio']:.2f}", "query_aware": r["query_aware"],
                     **{t: r["tasks"][t]["score"] if t in r["tasks"] else "" for t in tasks},
                     "score": r["average"], "ctxbench_method": r["method"], "source": r["source"],
                     "metric": r["metric"], "n": r["n"],
                     "held_per_question": held.get("total"), "held_text": held.get("text"),
                     "held_kv_slots": held.get("kv_slots"), "held_soft_slots": held.get("soft_slots"),
                     "kv_bytes_per_question": held.get("kv_bytes"), "budget_per_question": r["budget"],
                     "run": r["run"]})
    return header, rows


def ruler_report(table: dict[str, Any], roots: list[Path], out: Path, draw: bool = True) -> dict[str, Any]:
    """``<out>.md``, ``<out>.json``, ``<out>.png`` and ``ruler_kvpress_rows.csv`` beside them."""
    records = collect(roots)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    drew = draw and bool(records)
    if drew:
        plot(records, png, table.get("title", table["name"]))
    csv_path = out.parent / CSV_NAME
    if records:
        header, rows = kvpress_rows(records)
        with open(csv_path, "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    md = render(table, records, png.name if drew else None, CSV_NAME if records else None)
    out.write_text(md, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return {"markdown": md, "records": records, "path": out, "png": str(png) if drew else None,
            "csv": str(csv_path) if records else None}
