"""``score predictions=FILE format=NAME dataset=locomo|longmemeval``: an artifact read, matched and made into ordinary
prediction records; what the import found goes to results.json ``import`` (and ``judge`` when the
artifact stored judge labels), to results.md and to the console.

Each record is ``{id, question, prediction, answer, category, category_name, adversarial_answer,
evidence, conversation, source: {location, artifact_category, artifact_gold}}`` — question, gold,
category and evidence from LoCoMo, only the prediction (and the judge labels) from the artifact — so
any metric, and a judge panel, scores it like an eval run's own line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.data.errors import DataError
from ctxbench.metrics.base import build_metrics
from ctxbench.referee.categories import check_labels
from ctxbench.referee.formats import get_format
from ctxbench.referee.labels import judge_metrics
from ctxbench.referee.match import AMBIGUITY_RULE, match_by_id, match_rows

JUDGE_METRICS = ("llm_judge", "llm_judge_majority")
STORED_TOLERANCE = 1e-6
LIST_LIMIT = 50  # rows listed in results.md (results.json lists them all)


def load_locomo_full(dataset_cfg: Any) -> tuple[list[Any], set[str]]:
    """Every conversation of ``dataset.path`` in file order, and the ids ``dataset.*`` selects."""
    from ctxbench.data.locomo import load_locomo_file, select
    from ctxbench.data.sources import locate

    if dataset_cfg is None or str(dataset_cfg.name) not in ("locomo", "locomo_sample"):  # score's dataset= is optional
        raise ConfigError("score format=NAME matches rows to LoCoMo questions: add dataset=locomo "
                          "dataset.path=/path/to/locomo10.json")
    full = load_locomo_file(locate(dataset_cfg.path, "locomo"))
    chosen = select(full, dataset_cfg.conversations, dataset_cfg.categories, dataset_cfg.limit, dataset_cfg.sessions)
    return list(full), {q.id for s in chosen for q in s.questions}


def load_longmemeval_full(dataset_cfg: Any) -> tuple[list[Any], set[str]]:
    """Every sample (one per question) of the file ``dataset.path`` / ``dataset.release`` name (or the shipped
    sample), and the question ids ``dataset.question_types`` / ``questions`` / ``limit`` select."""
    from ctxbench.data.longmemeval import load_longmemeval_file, release_path, select

    name = "" if dataset_cfg is None else str(dataset_cfg.name)  # score's dataset= is optional
    if name not in ("longmemeval", "longmemeval_sample"):
        raise ConfigError("score format=longmemeval matches rows to LongMemEval questions by question_id: add "
                          "dataset=longmemeval dataset.path=/path/to/longmemeval_s_cleaned.json (the file the "
                          "hypotheses answer)")
    release = str(dataset_cfg.release or "s")
    full = load_longmemeval_file(release_path(dataset_cfg.path, release), release=release)
    chosen = select(full, dataset_cfg.question_types, dataset_cfg.questions, dataset_cfg.limit)
    return list(full), {q.id for s in chosen for q in s.questions}


DATASET_NAMES = {"locomo": "LoCoMo", "longmemeval": "LongMemEval"}
#: the dataset a format's rows are matched to (the format's ``dataset``; LoCoMo unless it names another):
#: how its questions are loaded and how rows find them
DATASETS = {"locomo": (load_locomo_full, match_rows), "longmemeval": (load_longmemeval_full, match_by_id)}


def record_of(m: Any) -> dict[str, Any]:
    q = m.question
    rec = {"id": q.id, "question": q.question, "prediction": m.row.prediction, "answer": q.answer,
           "category": q.category, "category_name": q.category_name, "adversarial_answer": q.adversarial_answer,
           "evidence": list(q.evidence), "conversation": m.conversation,
           "source": {"location": m.row.location, "artifact_category": m.row.category,
                      "artifact_gold": m.row.gold, "stored": dict(m.row.stored)}}
    for key in ("evidence_sessions", "abstention", "question_date", "release"):  # LongMemEval's question meta
        if key in (q.meta or {}):
            rec[key] = q.meta[key]
    return rec


def import_artifact(path: Path, fmt_name: str, dataset_cfg: Any, metric_names: list[str]):
    """(records, metrics, results.json ``import`` block, ``judge`` block or None)."""
    fmt = get_format(fmt_name)()
    rows = fmt.read(path)
    if not rows:
        raise DataError(path, f"no question rows (format={fmt_name})")
    load, match = DATASETS[getattr(fmt, "dataset", "locomo")]
    conversations, selected = load(dataset_cfg)
    res = match(rows, conversations)
    kept = [m for m in res.matched if m.question.id in selected]
    records = [record_of(m) for m in kept]
    labels = {m.question.id: m.row.labels for m in kept if m.row.labels is not None}
    wanted = [n for n in metric_names if n in JUDGE_METRICS]
    metrics = build_metrics([n for n in metric_names if n not in JUDGE_METRICS])
    metrics += judge_metrics(labels, fmt_name, wanted)
    missing = [q for q in res.missing if q.id in selected]
    by_cat: dict[str, int] = {}
    for q in missing:
        by_cat[q.category_name] = by_cat.get(q.category_name, 0) + 1
    block: dict[str, Any] = {
        "format": fmt_name, "dataset": DATASET_NAMES[getattr(fmt, "dataset", "locomo")], "artifact": str(path),
        "rows": len(rows), "matched": len(kept),
        "outside_selection": len(res.matched) - len(kept),
        "unmatched": {"n": len(res.unmatched), "rows": res.unmatched},
        "missing": {"n": len(missing), "by_category": by_cat, "ids": [q.id for q in missing]},
        "ambiguous": {"n": len(res.ambiguous), "rule": AMBIGUITY_RULE, "rows": res.ambiguous},
        "category_labels": check_labels([(m.row.category, m.question.category_name) for m in kept
                                         if m.row.category is not None]),
        "judge_labels": "none in the artifact" if not labels else f"{len(labels)} rows",
    }
    judge = None
    if labels:
        runs = max(len(v) for v in labels.values())
        judge = {"source": "artifact", "format": fmt_name, "runs": runs}
        models = sorted({m.row.judge_model for m in kept if m.row.judge_model})
        if models:  # the judge model the labels name (LongMemEval: autoeval_label.model)
            judge["models"] = models
            block["judge_models"] = models
    return records, metrics, block, judge, fmt


def stored_check(scored: list[dict[str, Any]], kept_rows: dict[str, dict[str, float]],
                 stored_metrics: dict[str, str]) -> dict[str, Any]:
    """Each stored per-question score beside ctxbench's metric of the same code: rows compared, the
    largest difference and the rows over ``STORED_TOLERANCE``."""
    out: dict[str, Any] = {}
    for stored, metric in stored_metrics.items():
        diffs = []
        for r in scored:
            have = kept_rows.get(str(r["id"]), {}).get(stored)
            if have is None or r.get(metric) is None:
                continue
            diffs.append((abs(float(r[metric]) - have), r["id"], have, r[metric]))
        if not diffs:
            continue
        over = [{"id": i, "stored": s, "ctxbench": c} for d, i, s, c in diffs if d > STORED_TOLERANCE]
        out[stored] = {"metric": metric, "rows": len(diffs), "max_abs_diff": max(d for d, *_ in diffs),
                       "tolerance": STORED_TOLERANCE, "rows_over_tolerance": len(over), "over": over}
    return out


def console_lines(block: dict[str, Any]) -> list[str]:
    lines = [f"import {block['format']}: {block['rows']} rows, {block['matched']} matched, "
             f"{block['unmatched']['n']} unmatched, {block['missing']['n']} {block.get('dataset', 'LoCoMo')} questions missing"
             + (f" ({', '.join(f'{k} {v}' for k, v in block['missing']['by_category'].items())})"
                if block['missing']['n'] else "")
             + (f", {block['ambiguous']['n']} repeated questions settled" if block['ambiguous']['n'] else ""),
             block["category_labels"]["line"]]
    for stored, c in (block.get("stored_scores") or {}).items():
        lines.append(f"stored {stored} vs {c['metric']}: {c['rows']} rows, max |diff| {c['max_abs_diff']:.2e}, "
                     f"{c['rows_over_tolerance']} over {c['tolerance']:g}")
    return lines


def markdown_section(block: dict[str, Any], judge: dict[str, Any] | None) -> str:
    from ctxbench.core.markdown_table import md_table

    lines = ["", f"## Import: format={block['format']}", "", f"Artifact: `{block['artifact']}`", "",
             *[f"- {ln}" for ln in console_lines(block)],
             f"- judge labels: {'the artifact’s own judge, ' + str(judge['runs']) + ' run(s)' if judge else 'none'}",
             f"- rows outside the dataset selection: {block['outside_selection']}"]
    if block["unmatched"]["n"]:
        rows = [[r["location"], r["question"], r["reason"]] for r in block["unmatched"]["rows"][:LIST_LIMIT]]
        lines += ["", f"### Unmatched rows ({block['unmatched']['n']})", "",
                  md_table(["location", "question", "reason"], rows, formatter=str)]
        if block["unmatched"]["n"] > LIST_LIMIT:
            lines.append(f"\n… {block['unmatched']['n'] - LIST_LIMIT} more in results.json import.unmatched")
    if block["ambiguous"]["n"]:
        rows = [[r["location"], r["question"], r["matched"], ", ".join(r["candidates"])]
                for r in block["ambiguous"]["rows"][:LIST_LIMIT]]
        lines += ["", f"### Repeated questions ({block['ambiguous']['n']}): {block['ambiguous']['rule']}", "",
                  md_table(["location", "question", "matched", "candidates"], rows, formatter=str)]
    return "\n".join(lines) + "\n"
