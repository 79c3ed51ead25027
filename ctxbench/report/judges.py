"""``python -m ctxbench report judges``: each panel judge's leniency, measured on the calibration set.

    python -m ctxbench report judges judge.panel=[mem0,zep,evermemos,longmemeval,strict] \\
        dataset=locomo dataset.path=LOCOMO.json [llm=...|judge_llm=...] [calibration_set.questions=40] \\
        [hydra.run.dir=DIR]

Builds the calibration set from the dataset's gold (:mod:`ctxbench.metrics.judges.calibration_set`, no
LLM), judges every item under every judge of ``judge.panel`` with the judge model (``judge_llm``, else
``llm``; ``judge.runs`` / ``temperature`` / ``seed`` as in eval and score; the call cache serves reruns)
and writes, in the run folder (``hydra.run.dir``, default outputs/report): judges.json (per judge: prompt
version, model, decoding, false-accept rate overall and per wrong-answer kind, false-reject rate, n,
Wilson 95% intervals, the ``lenient`` flag — :mod:`ctxbench.metrics.judges.leniency`), judges.md (the
same as a table) and judges_items.jsonl (each item with every judge's score). ``judge.calibration=``
that judges.json in an eval or score run puts the rates and flags into its results.json.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.metrics.judges.leniency import DEFAULT_LENIENT_ABOVE

JUDGES_JSON, JUDGES_MD, JUDGES_ITEMS = "judges.json", "judges.md", "judges_items.jsonl"


def judges_report(cfg: Any, llm: Any = None) -> dict[str, Any]:
    """Judge the calibration set with the panel; write judges.json / judges.md / judges_items.jsonl."""
    from ctxbench.core.registry import build
    from ctxbench.metrics.aggregate import score_records
    from ctxbench.metrics.judges.calibration_set import build_calibration_set, item_records, set_hash
    from ctxbench.metrics.judges.leniency import judges_markdown, leniency_report
    from ctxbench.metrics.judges.panel import panel_metrics
    from ctxbench.runs.results import atomic_write_text, run_dir, write_json, write_jsonl

    settings = cfg.calibration_set
    questions, seed = (int(settings.questions), int(settings.seed)) if settings else (40, 0)  # null: the defaults
    samples = build("dataset", cfg.dataset)
    items = build_calibration_set(samples, questions, seed)
    if not items:
        raise DataError(f"dataset={cfg.dataset.name}", "has no answerable questions (categories 1-4) to build "
                                                       "the judge calibration set from")
    metrics = panel_metrics(cfg, llm)  # the judge model is built (and checked) before any item is judged
    scored = score_records(item_records(items), metrics, progress=True)
    above = cfg.judge.lenient_above if cfg.judge else None
    described = {"dataset": str(cfg.dataset.name), "path": cfg.dataset.get("path"), "questions": questions,
                 "seed": seed, "items": len(items), "by_kind": dict(Counter(it["kind"] for it in items)),
                 "hash": set_hash(items)}
    report = leniency_report(items, scored, metrics, DEFAULT_LENIENT_ABOVE if above is None else float(above),
                             described)
    out = run_dir(cfg, default="outputs/report")
    out.mkdir(parents=True, exist_ok=True)
    names = [m.name for m in metrics]
    by_id = {str(r["id"]): r for r in scored}
    write_jsonl(out / JUDGES_ITEMS, [{**it, "scores": {n: by_id[it["id"]].get(n) for n in names}} for it in items])
    write_json(out / JUDGES_JSON, report)
    md = judges_markdown(report)
    atomic_write_text(out / JUDGES_MD, md)
    print(md)
    flagged = [n for n, j in report["judges"].items() if j["lenient"]]
    print(f"report judges: {len(items)} items, {len(report['judges'])} judges; lenient: "
          f"{', '.join(flagged) or 'none'} → {out / JUDGES_JSON}")
    return {**report, "path": str(out / JUDGES_JSON)}
