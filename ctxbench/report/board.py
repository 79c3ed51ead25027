"""A board: many systems on the same questions, one row each (``report board=NAME|FILE runs=DIR,...``;
``report table=locomo_all`` is the same).

A paper table (:mod:`.tables`) sets ours beside published cells; a board has no published values. Its
file (:mod:`.board_file`: a stored ``ctxbench/report/papers/<NAME>.yaml`` with ``kind: board``, or a
user's file anywhere) lists ``rows`` — ``system``, ``dataset``, ``settings``, ``label``, ``paradigm``
(compression | memory | baseline), for a trained method ``trained_by`` and, for ``reproduce``, the
``experiment`` that makes the row. The run folders given fill the rows by system, dataset and settings
(:mod:`.board_match`; runs of a system no row names get rows of their own with ``add_unmatched``);
each run's line says which row it filled or why it was skipped. The columns (:mod:`.board_columns`)
are registered metrics (F1, BLEU-1, ROUGE-L ± bootstrap stderr, J when a run has ``llm_judge``, or any
other, a plug-in's included) and cost columns: session evidence recall@5 when some row's run has
``evidence_recall`` (systems that retrieve), held context per question (results.json
``cost.held_per_question.total``: text tokens + KV slots + soft slots the answering model holds when it
answers, the one axis every paradigm is counted on), tokens per question kept apart — read and written
by the answering model, construction (amortised), judging —, memory held per history (KV bytes for a
compression method, items and tokens for a memory system), answer latency p50, ingest seconds; last
``guards``: why the row's number may not measure a memory (:mod:`.guards`: the run's
``health.warnings``, a lenient judge, an answer prompt other than the other rows').

Rows are compared only on the same questions: each run's question ids (predictions.jsonl) are
hashed; a row whose set differs from the most common one is marked and left off the plot.
``<out>.png`` plots F1 against held context per question (log scale) with the Pareto front (no other
row holds at most as much and has more F1) marked. A run evaluated before held counts existed
(``ctxbench-cost-4``) has no held value: its row says so and stays off the front and the plot.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from ctxbench.metrics.evidence_recall import headline as recall_headline
from ctxbench.metrics.judges.leniency import lenient_metrics
from ctxbench.report import board_columns as C
from ctxbench.report.board_match import Matched, match_runs
from ctxbench.report.guards import MARKS_NOTE, answer_prompt, odd_prompts, run_marks
from ctxbench.report.markdown import MISSING, md_table
from ctxbench.report.runs import Run, find_runs

METRICS = (("F1", "f1"), ("BLEU-1", "bleu1"), ("ROUGE-L", "rougeL"), ("J", "llm_judge"))
RECALL_K = C.RECALL_K
HELD_UNKNOWN = C.HELD_UNKNOWN


def question_ids(run: Run) -> list[str]:
    """The question ids a run answered (predictions.jsonl), in file order."""
    path = run.path / "predictions.jsonl"
    if not path.exists():
        return []
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            ids.append(str(json.loads(line).get("id")))
    return ids


def question_hash(ids: list[str]) -> str | None:
    """The question set's hash (12 hex digits of sha256 over the sorted ids; None for no ids): rows, and
    the runs ``report compare`` / ``report reruns`` pair, must share it."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12] if ids else None


def _num(node: Any, *keys: str) -> float | None:
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def row_record(spec: dict[str, Any], run: Run | None) -> dict[str, Any]:
    """One board row: the run's overall metrics with stderr (every one it has, ``metrics``; F1, BLEU-1,
    ROUGE-L and J also flat), cost, memory and latency."""
    rec: dict[str, Any] = {"row": spec["row"], "label": spec.get("label", spec["row"]),
                           "paradigm": spec.get("paradigm", "memory"), "system": spec.get("system"),
                           "dataset": spec.get("dataset"), "settings": spec.get("settings") or {},
                           "added": bool(spec.get("added")), "experiment": spec.get("experiment"),
                           "trained_by": spec.get("trained_by"), "run": None if run is None else str(run.path)}
    if run is None or not run.results or not run.results.get("overall"):
        return rec
    res, ov = run.results, run.results["overall"]
    cost = res.get("cost") or {}
    rec["n"] = ov.get("n")
    rec["metrics"] = {k: float(v) for k, v in ov.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "n"}
    for _, key in METRICS:
        rec[key], rec[f"{key}_stderr"] = _num(ov, key), _num(ov, f"{key}_stderr")
    tq = cost.get("tokens_per_question") or {}
    read, written = _num(tq, "answer_prompt") or 0.0, _num(tq, "answer_completion") or 0.0
    build = (_num(tq, "construction_prompt_amortised") or 0.0) + (_num(tq, "construction_completion_amortised") or 0.0)
    judging = _num(tq, "judging")  # None: a run before ctxbench-cost-5 (judging not counted)
    rec.update(read_tokens=read, written_tokens=written, answer_tokens=read + written, construction_tokens=build,
               judging_tokens=judging, tokens_per_question=read + written + build + (judging or 0.0),
               held=_num(cost, "held_per_question", "total"),
               kv_bytes=_num(cost, "memory_per_history", "kv_bytes") or None,
               memory_items=_num(cost, "memory_per_history", "items"),
               memory_tokens=_num(cost, "memory_per_history", "tokens"),
               answer_p50_s=_num(cost, "latency_s", "answer", "p50"),
               answer_cached_share=_num(cost, "latency_s", "answer", "cached_share"),
               ingest_s=_num(cost, "latency_s", "ingest", "total"),
               health=(res.get("health") or {}).get("status"),
               checkpoint=(res.get("config") or {}).get("checkpoint"),
               answer_prompt=answer_prompt(res), guards=run_marks(res))
    rec["session_recall"] = recall_headline(res.get("evidence_recall"), RECALL_K)  # systems that retrieve
    rec["questions"] = question_hash(question_ids(run))
    rec["lenient"] = sorted(lenient_metrics(res))  # metrics whose judge was flagged on the calibration set
    rec["llm_judge_lenient"] = "llm_judge" in rec["lenient"]
    rec["judge_model"] = judge_model(res)  # who judged J: rows judged by another model are marked (mark_judges)
    rec["plugins"] = plugin_sources(res)  # a plug-in's distribution and version (or file and sha256) beside its row
    return rec


def plugin_sources(res: dict[str, Any]) -> list[str]:
    """``memory=lastturns from lastturns-pkg 0.2.0`` for each plug-in results.json's provenance records."""
    out = []
    for p in (res.get("provenance") or {}).get("plugins") or []:
        where = (f"{p.get('distribution')} {p.get('version')}" if p.get("distribution")
                 else f"{Path(str(p.get('file'))).name} sha256:{str(p.get('sha256'))[:12]}")
        out.append(f"{p.get('kind')}={p.get('name')} from {where}")
    return out


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (at most its x and more y, or less x and as much y)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 > y) or (x2 < x and y2 >= y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return front


def mark_questions(records: list[dict[str, Any]]) -> str | None:
    """The most common question set; rows on another set get ``other_questions``."""
    sets = Counter(r["questions"] for r in records if r.get("questions"))
    if not sets:
        return None
    common = sets.most_common(1)[0][0]
    for r in records:
        r["same_questions"] = r.get("questions") == common if r.get("questions") else None
    return common


def judge_model(res: dict[str, Any]) -> str | None:
    """The model that judged a run's J (results.json ``metrics.llm_judge.model``), None when not judged."""
    node = (res.get("metrics") or {}).get("llm_judge")
    return str(node["model"]) if isinstance(node, dict) and node.get("model") else None


def mark_judges(records: list[dict[str, Any]]) -> None:
    """Add to ``guards`` the mark of each row whose J was judged by another model than most rows' J."""
    known = {r["row"]: r["judge_model"] for r in records if r.get("judge_model")}
    if len(set(known.values())) < 2:
        return
    common = Counter(known.values()).most_common(1)[0][0]
    for r in records:
        if r["row"] in known and known[r["row"]] != common:
            r.setdefault("guards", []).append(f"judged by {known[r['row']]} (other rows: {common})")


def mark_prompts(records: list[dict[str, Any]]) -> None:
    """Add to ``guards`` the mark of each row whose answer prompt differs from the other rows'."""
    for row, mark in odd_prompts({r["row"]: r.get("answer_prompt") for r in records}).items():
        next(r for r in records if r["row"] == row).setdefault("guards", []).append(mark)


ADDED = " (added from runs)"


def render_board(board: dict[str, Any], records: list[dict[str, Any]], png: str | None) -> str:
    columns = C.shown(board.get("columns") or C.parse_columns(None, Path(board.get("path") or board["name"])), records)
    held = any(c.name == "held" for c in columns)
    front = set(r["row"] for r in records if r.get("pareto"))
    header = ["system", "paradigm", "n"] + [C.header(c) for c in columns] + (["Pareto"] if held else []) + ["guards"]
    rows = []
    for r in records:
        label = r["label"] + ("" if r.get("same_questions") in (None, True) else " (other questions)") \
            + (ADDED if r.get("added") else "")
        if r.get("run") is None:
            rows.append([label, r["paradigm"], "no run found"] + [MISSING] * (len(header) - 3))
            continue
        rows.append([label, r["paradigm"], r.get("n")] + [C.cell(c, r) for c in columns]
                    + (["★" if r["row"] in front else ""] if held else []) + ["; ".join(r.get("guards") or [])])
    lines = [f"# {board.get('title', board['name'])}", ""]
    if board.get("description"):
        lines += [str(board["description"]).strip(), ""]
    lines += [md_table(header, rows), ""]
    plugged = [r for r in records if r.get("plugins")]
    if plugged:
        lines += ["Plug-ins: " + "; ".join(f"{r['label']}: {', '.join(r['plugins'])}" for r in plugged) + ".", ""]
    trained = [r for r in records if r.get("trained_by")]
    if trained:
        lines += ["Trained rows: " + "; ".join(
            f"{r['label']} from `train experiment={r['trained_by']}`"
            + (f" (checkpoint `{r['checkpoint']}`)" if r.get("checkpoint") else "") for r in trained) + ".", ""]
    notes = ["± = bootstrap standard error over questions."] + C.notes(columns, records)
    if held:
        notes.append("★ = on the Pareto front of F1 against held context per question.")
    if any(r.get("added") for r in records):
        notes.append("added from runs = a run of a system no row of the board names (add_unmatched=true), "
                     "labelled by its system and the system settings it was run with.")
    lines += [" ".join(notes) + " " + MARKS_NOTE]
    if png:
        lines += ["", f"![F1 against held context per question]({png})"]
    return "\n".join(lines) + "\n"


def plot_board(records: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in records if r.get("f1") is not None and r.get("held") is not None
           and r.get("same_questions") is not False]
    colors = {"compression": "tab:blue", "memory": "tab:orange", "baseline": "tab:gray"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for paradigm, color in colors.items():
        group = [r for r in pts if r["paradigm"] == paradigm]
        ax.scatter([max(r["held"], 1.0) for r in group], [r["f1"] for r in group], c=color,
                   label=paradigm, s=40, zorder=3)
    for r in pts:
        ax.annotate(r["row"], (max(r["held"], 1.0), r["f1"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    front = sorted((r for r in pts if r.get("pareto")), key=lambda r: r["held"])
    if front:
        ax.step([max(r["held"], 1.0) for r in front], [r["f1"] for r in front], where="post",
                color="black", lw=1, ls="--", label="Pareto front", zorder=2)
    ax.set_xscale("log")
    ax.set_xlabel("held context per question (text tokens + KV slots + soft slots, log)")
    ax.set_ylabel("F1")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def board_report(board: dict[str, Any], matched: Matched, out: Path, plot: bool = True) -> dict[str, Any]:
    """The board's records, markdown and plot from the runs :func:`.board_match.match_runs` gave its rows."""
    records = [row_record(spec, matched.runs.get(spec["row"])) for spec in board["rows"] + matched.added]
    mark_questions(records)
    mark_prompts(records)
    mark_judges(records)  # J judged by another model than the other rows': marked, never silently compared
    live = [r for r in records if r.get("f1") is not None and r.get("held") is not None
            and r.get("same_questions") is not False]
    for i in pareto([(r["held"], r["f1"]) for r in live]):
        live[i]["pareto"] = True
    png = out.with_suffix(".png")
    drew = plot and bool(live)
    if drew:
        plot_board(records, png, board.get("title", board["name"]))
    md = render_board(board, records, png.name if drew else None)
    return {"markdown": md, "records": records, "png": str(png) if drew else None}


def run_board(spec: str | dict[str, Any], roots: list[Path], out: str | Path | None = None,
              add_unmatched: bool | None = None, plot: bool = True) -> dict[str, Any]:
    """``report board=spec runs=roots``: the board (a name, a file, or one already loaded) filled from the
    run folders below ``roots``; writes ``<out>.md`` / ``.json`` / ``.png`` (:func:`.board_file.board_out`).
    ``add_unmatched`` None: the board's own ``add_unmatched`` (default false)."""
    from ctxbench.report.board_file import board_out, load_board

    board = load_board(spec) if isinstance(spec, str) else spec
    path = board_out(board, out)
    skipped: list[str] = []
    runs = find_runs(roots, skipped=skipped, quiet=True)
    add = bool(board.get("add_unmatched", False)) if add_unmatched is None else bool(add_unmatched)
    matched = match_runs(board, runs, add)
    matched.lines += [f"skipped {why}" for why in skipped]
    path.parent.mkdir(parents=True, exist_ok=True)
    result = board_report(board, matched, path, plot=plot)
    _write(path, result["markdown"])
    _write(path.with_suffix(".json"), json.dumps(result["records"], indent=2) + "\n")
    found = sorted(r["row"] for r in result["records"] if r.get("run"))
    return {**result, "path": path, "found": found, "found_label": "rows filled", "lines": matched.lines,
            "board": board}


def _write(path: Path, text: str) -> None:
    """Written whole or not at all (a temporary file beside it, then renamed over)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
