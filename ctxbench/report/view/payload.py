"""One run folder (an ``eval`` or ``score`` run, or an imported artifact's) → the viewer's JSON payload.

Reads ``results.json`` (header, per-category table with standard errors; optional),
``predictions.jsonl`` (one row per question; required) and ``samples.jsonl`` (the context each answer
was given, when the run had ``log_samples=true``; optional). Every string is scrubbed of secrets
(:func:`ctxbench.core.secrets.redact`: secret-named keys and key-shaped strings). A row keeps at most ``max_context_chars`` of its context
unless ``contexts`` is true, so a large run stays a file of a few MB.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxbench.core.secrets import redact
from ctxbench.report.compare import PREDICTIONS, RunScores, category_of, load_scores, value
from ctxbench.runs.results import read_jsonl_tolerant

SAMPLES = "samples.jsonl"
#: usage fields a row shows (held tokens first: the budget axis), when the record has them
USAGE_KEYS = ("held_text", "held_kv_slots", "held_soft_slots", "memory_items", "memory_tokens",
              "answer_prompt_tokens", "answer_completion_tokens", "answer_calls", "construction_prompt_tokens",
              "construction_completion_tokens", "construction_calls", "answer_seconds", "ingest_seconds")
#: results.json fields the header shows as they are
HEADER_KEYS = ("command", "created", "system", "dataset", "qa_prompt", "judges", "judge", "metrics", "import",
               "llm", "provenance", "git", "seed", "argv", "cost", "health", "concurrency", "kept_not_scored")


def _clip(text: Any, limit: int | None) -> tuple[str | None, int]:
    """``(text cut to limit chars, its full length)``; None stays None."""
    if text is None:
        return None, 0
    s = text if isinstance(text, str) else str(text)
    return (s if limit is None or len(s) <= limit else s[:limit]), len(s)


def _contexts(folder: Path) -> dict[str, Any]:
    """samples.jsonl's context by question id (a question answered again on resume: its last line)."""
    rows, _ = read_jsonl_tolerant(folder / SAMPLES) if (folder / SAMPLES).is_file() else ([], 0)
    return {str(r.get("id")): r.get("context") for r in rows if isinstance(r, dict) and "id" in r}


def question_row(rec: dict[str, Any], metrics: list[str], context: Any, limit: int | None) -> dict[str, Any]:
    """One question as the page shows it: scores by metric / judge, the answer raw and post-processed,
    usage, and what the system retrieved or kept (clipped to ``limit`` chars)."""
    usage = rec.get("usage") if isinstance(rec.get("usage"), dict) else {}
    meta = rec.get("meta") if isinstance(rec.get("meta"), dict) else {}
    if context is not None and not isinstance(context, str):
        context = json.dumps(context, ensure_ascii=False, default=str)
    ctx, full = _clip(None if context is None else redact(context), limit)  # scrubbed before it is cut
    row = {"id": str(rec.get("id")), "category": category_of(rec), "question": rec.get("question"),
           "answer": rec.get("answer"), "prediction": rec.get("prediction"),
           "raw_prediction": rec.get("raw_prediction"), "failed": bool(rec.get("failed")),
           "scores": {m: value(rec, m) for m in metrics},
           "usage": {k: usage[k] for k in USAGE_KEYS if k in usage}}
    if ctx is not None:
        row["context"] = ctx
        if len(ctx) < full:
            row["context_note"] = f"first {len(ctx):,} of {full:,} characters (view ... contexts=true keeps all)"
    if meta.get("retrieved") is not None:
        row["retrieved"] = meta["retrieved"]
    for k in ("adversarial_answer", "error", "source"):
        if rec.get(k) is not None:
            row[k] = rec[k]
    return row


def category_table(results: dict[str, Any], metrics: list[str]) -> list[dict[str, Any]]:
    """results.json ``overall`` and ``by_category`` as rows: n, and each metric's mean and standard error."""
    groups = [("overall", results.get("overall"))] + list((results.get("by_category") or {}).items())
    out = []
    for name, g in groups:
        if not isinstance(g, dict):
            continue
        out.append({"category": str(name), "n": g.get("n"),
                    "values": {m: [g.get(m), g.get(f"{m}_stderr")] for m in metrics if m in g}})
    return out


def header(results: dict[str, Any], folder: Path, scores: RunScores, read_problems: list[str]) -> dict[str, Any]:
    """What the run is: system, dataset, model, answer prompt, judges, provenance and health."""
    h = {k: results[k] for k in HEADER_KEYS if k in results}
    h["folder"] = str(folder)
    h["files"] = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl", ".md"))
    warnings = list(read_problems)
    health = results.get("health") if isinstance(results.get("health"), dict) else {}
    for w in health.get("warnings") or []:
        warnings.append(w.get("message", str(w)) if isinstance(w, dict) else str(w))
    if health.get("status") not in (None, "ok"):
        warnings.insert(0, f"health: {health.get('status')} {health.get('reason', '')}".strip())
    if not results:
        warnings.append("no results.json: header and per-category table unavailable")
    h["warnings"] = warnings
    h["n_questions"] = len(scores.records)
    return h


def run_payload(path: str | Path, contexts: bool = False, max_context_chars: int = 600) -> dict[str, Any]:
    """One run folder (or its predictions.jsonl) as the viewer's payload (scrubbed of secrets)."""
    scores = load_scores(Path(path))
    folder = scores.path
    problems = []
    try:
        ctx = _contexts(folder)
    except Exception as e:  # a damaged samples.jsonl leaves the rows without context, said in the header
        ctx = {}
        problems.append(f"{SAMPLES}: not read ({e})")
    metrics = [m for m in scores.metrics if "@" not in m]
    limit = None if contexts else max_context_chars
    rows = [question_row(r, metrics, ctx.get(str(r.get("id"))), limit) for r in scores.records]
    judges = [m for m in metrics if m.startswith("llm_judge")]
    return redact({"name": folder.name, "header": header(scores.results, folder, scores, problems),
                     "metrics": metrics, "judges": judges,
                     "categories": category_table(scores.results, metrics), "rows": rows,
                     "has_samples": bool(ctx), "predictions": PREDICTIONS})
