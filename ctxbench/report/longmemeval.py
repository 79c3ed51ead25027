"""``python -m ctxbench report table=longmemeval [runs=DIR,DIR]``: LongMemEval accuracy, published beside ours.

The published numbers are data (``ctxbench/report/papers/longmemeval.yaml``, ``kind: longmemeval``): one
row per system × reader × judge × release of a named source, percent per question type, ``overall``,
``task_averaged`` and ``abstention`` where the source gives them. Our rows are every run found below
``runs=`` (default ``outputs``, ``multirun``) whose results.json has the ``longmemeval`` block (the
evaluator writes it for questions with LongMemEval types: ``by_type`` {type: {n, metric: mean}},
``overall``, ``task_averaged``, ``abstention``), read for ``llm_judge`` (else the block's first
metric), ×100; beside them the run's session-level evidence recall (results.json ``evidence_recall``)
where the system retrieves.

Each of our rows names its reader (``llm.model``; a compression method's ``model``), its judge (results.json
``judges``: the panel judge of the metric read and its model; for an imported artifact, ``judge`` with the
models its labels name) and its release (``dataset.release``; ``sample`` for ``longmemeval_sample``).
A published row is comparable with one of our runs only when the release, the reader and the judge
(model and LongMemEval's prompts) are the same; otherwise the table says "not comparable" and against
which run, with why. Model names compare without a provider prefix or a date suffix (``gpt-4o`` =
``openai/gpt-4o-2024-08-06``). Writes ``<out>.md`` and ``<out>.json`` (the records), each atomically.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ctxbench.report.markdown import MISSING, md_table
from ctxbench.report.runs import ReportError, Run, find_runs
from ctxbench.runs.results import atomic_write_text, write_json

BLOCK = "longmemeval"
RECALL = "evidence_recall"
METRIC = "llm_judge"
JUDGE_PROMPT = "longmemeval"  # LongMemEval's own per-type prompts (ctxbench/metrics/judges/longmemeval.py)
SUMMARY = ("overall", "task_averaged", "abstention")
RECALL_KEYS = ("recall_any@1", "recall_any@5", "recall_all@5", "ndcg@5", "recall_any@10", "recall_all@10", "ndcg@10")
_DATE = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def check_table(table: dict[str, Any], path: str) -> dict[str, Any]:
    """The YAML's shape: ``types``, ``sources`` and ``rows`` (each naming a known source, its reader,
    judge, release and values of known columns); a wrong one is one line naming the row and key."""
    for key in ("name", "types", "sources", "rows"):
        if key not in table:
            raise ReportError(f"{path}: missing required key {key!r}")
    columns = set(table["types"]) | set(SUMMARY)
    for i, row in enumerate(table["rows"]):
        where = f"{path}: rows[{i}] ({row.get('row', '?')})"
        for key in ("row", "source", "reader", "judge", "release", "values"):
            if key not in row:
                raise ReportError(f"{where}: missing required key {key!r}")
        if row["source"] not in table["sources"]:
            raise ReportError(f"{where}: source {row['source']!r} is not in sources ({', '.join(table['sources'])})")
        unknown = sorted(set(row["values"]) - columns)
        if unknown:
            raise ReportError(f"{where}: values has {', '.join(unknown)}, not a question type or {'/'.join(SUMMARY)}")
        for k, v in row["values"].items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ReportError(f"{where}: values.{k} is {v!r}, expected a number (percent)")
    return table


def model_key(name: Any) -> str | None:
    """A model name as compared: lower case, no ``provider/`` prefix, no ``-YYYY-MM-DD`` suffix."""
    if name is None or str(name).strip() == "":
        return None
    return _DATE.sub("", str(name).strip().lower().rsplit("/", 1)[-1])


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def reader_of(run: Run) -> str | None:
    """The model that answered: a compression method's ``model`` (label, else name), else ``llm.model``;
    None for an imported artifact (the artifact does not say)."""
    res, cfg = run.results or {}, run.config
    if isinstance(res.get("import"), dict):
        return None
    if _get(cfg, "method.name"):
        return _get(cfg, "model.label") or _get(cfg, "model.name")
    return _get(cfg, "llm.model")


def release_of(run: Run) -> str | None:
    cfg = run.config
    release = _get(cfg, "dataset.release")
    if release:
        return str(release)
    name = str(_get(cfg, "dataset.name") or (run.results or {}).get("dataset") or "")
    return "sample" if name.endswith("_sample") else None


def judge_of(run: Run, metric: str) -> dict[str, Any]:
    """{name, model, prompt}: the panel judge that produced ``metric`` (results.json ``judges``), or an
    imported artifact's own judge (results.json ``judge``: LongMemEval's logs were graded with its prompts)."""
    res = run.results or {}
    for name, j in (res.get("judges") or {}).items():
        if isinstance(j, dict) and metric in (j.get("metrics") or [metric]):
            return {"name": name, "model": j.get("model"), "prompt": name}
    art = res.get("judge")
    if isinstance(art, dict) and art.get("source") == "artifact":
        models = art.get("models") or []
        return {"name": f"artifact ({art.get('format')})", "model": models[0] if len(models) == 1 else
                (", ".join(models) or None), "prompt": JUDGE_PROMPT if art.get("format") == "longmemeval" else None}
    return {"name": None, "model": None, "prompt": None}


def block_metric(block: dict[str, Any]) -> str | None:
    """``llm_judge`` when the block has it, else its first metric."""
    rows = [r for r in (block.get("by_type") or {}).values() if isinstance(r, dict)] + [block.get("overall") or {}]
    names = [k for r in rows for k in r if k != "n" and not k.endswith(("_stderr", "_std", "_n"))]
    return METRIC if METRIC in names else (names[0] if names else None)


def _pct(v: Any) -> float | None:
    return None if isinstance(v, bool) or not isinstance(v, (int, float)) else 100.0 * float(v)


def run_record(run: Run, types: list[str]) -> dict[str, Any]:
    res = run.results or {}
    block = res[BLOCK]
    if not isinstance(block, dict):
        raise ReportError(f"{run.path}: results.json {BLOCK} is not an object")
    metric = block_metric(block)
    by_type = block.get("by_type") or {}
    values: dict[str, float | None] = {t: _pct((by_type.get(t) or {}).get(metric)) for t in types}
    for key in SUMMARY:
        values[key] = _pct((block.get(key) or {}).get(metric))
    ns = [r.get("n") for r in by_type.values() if isinstance(r, dict) and isinstance(r.get("n"), int)]
    judge = judge_of(run, metric or METRIC)
    recall = res.get(RECALL) if isinstance(res.get(RECALL), dict) else None
    return {"kind": "ours", "row": run.path.name, "label": f"ours: {run.path.name}", "run": str(run.path),
            "departures": departures(res),
            "system": res.get("system"), "reader": reader_of(run), "judge": judge["model"],
            "judge_name": judge["name"], "judge_prompt": judge["prompt"], "release": release_of(run),
            "n": sum(ns) if ns else None, "n_by_type": {t: (by_type.get(t) or {}).get("n") for t in types},
            "abstention_n": (block.get("abstention") or {}).get("n"), "metric": metric, "values": values,
            "evidence_recall": None if recall is None else {
                "n": recall.get("n"), "session": {k: (recall.get("session") or {}).get(k) for k in RECALL_KEYS},
                "turn": {k: (recall.get("turn") or {}).get(k) for k in RECALL_KEYS}}}


READER_CAP = 500  # LongMemEval's reader: src/generation max_tokens


def departures(res: dict[str, Any]) -> list[str]:
    """Where a run departs from LongMemEval's own reading in ways that move its numbers: a reader answer cap
    other than LongMemEval's 500 tokens (results.json ``qa_prompt.answer_max_tokens``) and sessions dated
    after their question dropped (``dataset_quirks.sessions_after_question``; LongMemEval reads them)."""
    out = []
    cap = (res.get("qa_prompt") or {}).get("answer_max_tokens")
    if isinstance(cap, int) and cap != READER_CAP:
        out.append(f"answer-cap {cap} tokens (LongMemEval's reader: {READER_CAP}; memory.answer_max_tokens={READER_CAP})")
    dropped = (res.get("dataset_quirks") or {}).get("sessions_after_question")
    if dropped:
        out.append(f"sessions-after-question {dropped} dropped (LongMemEval reads them; dataset.after_question=keep)")
    return out


def why_not(pub: dict[str, Any], ours: dict[str, Any]) -> str | None:
    """Why a published row cannot stand beside one of our runs (release, reader, judge, and the run's own
    departures from LongMemEval's reading: :func:`departures`), else None."""
    diffs = list(ours.get("departures") or [])
    if str(pub.get("release")) != str(ours.get("release")):
        diffs.append(f"release {pub.get('release')} vs ours {ours.get('release')}")
    if model_key(pub.get("reader")) is None or model_key(pub.get("reader")) != model_key(ours.get("reader")):
        diffs.append(f"reader {pub.get('reader') or 'not stated'} vs ours {ours.get('reader') or 'unknown'}")
    if model_key(pub.get("judge")) is None or model_key(pub.get("judge")) != model_key(ours.get("judge")):
        diffs.append(f"judge {pub.get('judge') or 'not stated'} vs ours {ours.get('judge') or 'none'}")
    elif pub.get("judge_prompt") != ours.get("judge_prompt"):
        diffs.append(f"judge prompts {pub.get('judge_prompt') or 'not stated'} vs ours {ours.get('judge_prompt')}")
    return "; ".join(diffs) or None


def published_records(table: dict[str, Any], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in table["rows"]:
        rec = {"kind": "published", "row": row["row"], "label": row.get("label", row["row"]),
               "source": row["source"], "system": row.get("system"), "reader": row.get("reader"),
               "judge": row.get("judge"), "judge_name": None, "judge_prompt": row.get("judge_prompt"),
               "release": row.get("release"), "n": row.get("n"), "metric": "accuracy",
               "values": {k: (None if row["values"].get(k) is None else float(row["values"][k]))
                          for k in [*table["types"], *SUMMARY]}}
        rec["comparable_with"] = [o["run"] for o in ours if why_not(rec, o) is None]
        rec["not_comparable"] = [{"run": o["run"], "why": w} for o in ours if (w := why_not(rec, o))]
        out.append(rec)
    return out


def _num(v: Any) -> str:
    return MISSING if v is None else f"{v:.1f}"


def _versus(rec: dict[str, Any]) -> str:
    if rec["kind"] == "ours":
        return f"{rec['metric'] or MISSING}"
    parts = [f"comparable with {Path(r).name}" for r in rec["comparable_with"]]
    groups: dict[str, list[str]] = {}  # the fields that differ → the runs they differ from (the JSON has the values)
    for x in rec["not_comparable"]:
        fields = ", ".join(part.split(" ")[0] + (" prompts" if part.startswith("judge prompts") else "")
                           for part in x["why"].split("; "))
        groups.setdefault(fields, []).append(Path(x["run"]).name)
    n_ours = len(rec["comparable_with"]) + len(rec["not_comparable"])
    parts += [f"not comparable ({fields} differ" + (" from every run below)" if len(runs) == n_ours > 1
                                                     else f": {', '.join(runs)})")
              for fields, runs in groups.items()]
    return "; ".join(parts) or "no run of ours found"


def render(table: dict[str, Any], records: list[dict[str, Any]]) -> str:
    types, short = table["types"], table.get("short") or {}
    lines = [f"# {table.get('title', table['name'])}", "",
             "Percent correct per LongMemEval question type (abstention questions count in their type, as "
             "LongMemEval's print_qa_metrics.py counts them), overall, task-averaged (mean of the six type "
             "means) and on abstention questions alone. Published rows first, then ours (results.json "
             f"`{BLOCK}`, metric named in the last column). A published row is comparable with one of our "
             "runs only with the same release, reader and judge (model and LongMemEval's prompts); — = not "
             "published / not measured.", "", "Sources:", ""]
    for key, src in table["sources"].items():
        lines.append(f"- `{key}`: {src.get('paper')}" + (f" (arXiv {src['arxiv']})" if src.get("arxiv") else "")
                     + f", {src.get('tables')}; read from {src.get('retrieved_from')}.")
    header = ["row", "system", "reader", "judge", "release", "n", *[short.get(t, t) for t in types],
              "overall", "task-avg", "abstention", "vs ours / metric"]
    rows = [[r["label"] + (f" [{r['source']}]" if r.get("source") else ""), r.get("system") or MISSING,
             r.get("reader") or MISSING, (r.get("judge") or "not stated") + (f" ({r['judge_prompt']} prompts)"
                                                                            if r.get("judge_prompt") else ""),
             r.get("release") or MISSING, MISSING if r.get("n") is None else r["n"],
             *[_num(r["values"].get(t)) for t in types], *[_num(r["values"].get(k)) for k in SUMMARY], _versus(r)]
            for r in records]
    lines += ["", "## Accuracy by question type (%)", "", md_table(header, rows, formatter=str), ""]
    recall = [r for r in records if r["kind"] == "ours" and r.get("evidence_recall")]
    if recall:
        keys = [k for k in RECALL_KEYS if any(r["evidence_recall"][lv].get(k) is not None
                                              for r in recall for lv in ("session", "turn"))]
        lines += ["## Evidence recall (ours; results.json `evidence_recall`, LongMemEval's recall_any / "
                  "recall_all / NDCG at k)", ""]
        rrows = [[r["row"], r.get("system") or MISSING, level, r["evidence_recall"].get("n") or MISSING,
                  *[MISSING if r["evidence_recall"][level].get(k) is None else f"{r['evidence_recall'][level][k]:.3f}"
                    for k in keys]] for r in recall for level in ("session", "turn")]
        lines += [md_table(["run", "system", "level", "n", *keys], rrows, formatter=str), ""]
    if table.get("notes"):
        lines += ["Notes: " + " ".join(str(table["notes"]).split()), ""]
    if table.get("not_found"):
        lines += ["Not found: " + " ".join(str(table["not_found"]).split()), ""]
    return "\n".join(lines)


def collect(roots: list[Path], types: list[str]) -> list[dict[str, Any]]:
    runs = [r for r in find_runs([p for p in roots if p.exists()]) if isinstance((r.results or {}).get(BLOCK), dict)]
    return [run_record(r, types) for r in sorted(runs, key=lambda r: str(r.path))]


def longmemeval_report(table: dict[str, Any], roots: list[Path], out: Path, path: str = "longmemeval.yaml") -> dict[str, Any]:
    """The published rows and every LongMemEval run below ``roots``; ``out``.md and ``out``.json."""
    table = check_table(table, path)
    ours = collect(roots, list(table["types"]))
    records = published_records(table, ours) + ours
    md = render(table, records)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, md)
    write_json(out.with_suffix(".json"), records)
    return {"markdown": md, "path": out, "records": records}
