"""``python -m ctxbench score``: the metrics of a predictions file, and the metrics ``eval`` scores with.

``metrics=`` (and, for ``llm_judge``, the judge LLM) are built from the config before any question is
answered, so a bad metric or an unreachable judge fails at once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.evaluation.finalize import finalize, summary_line
from ctxbench.metrics.judges import panel as judge_panel
from ctxbench.metrics.base import Metric, build_metrics
from ctxbench.runs.results import run_dir
from ctxbench.runs.wandb_log import check_logger, log_results


def default_metrics() -> list[str]:
    """evaluate_samples' metrics when given none: the eval schema's (built when asked, not at import)."""
    from ctxbench.config.schemas import command_schema
    from ctxbench.config.setting import defaults

    return list(defaults(command_schema("eval"))["metrics"])


PREDICTIONS_HINT = ("predictions= takes the predictions.jsonl that `python -m ctxbench eval` writes in its run folder "
                    "(outputs/eval/<run>/predictions.jsonl, or that folder)")


def judge_llm(cfg: Any, llm: Any = None, force: bool = False) -> Any:
    """The LLM ``llm_judge`` judges with (:func:`ctxbench.metrics.judges.panel.judge_llm`)."""
    return judge_panel.judge_llm(cfg, llm, force)


def metrics_of(cfg: Any, llm: Any = None) -> list[Metric]:
    """The metrics of ``metrics=``, with their judge LLM (``llm``, the evaluated system's, if no judge_llm);
    ``judge.panel`` makes one ``llm_judge`` metric per judge (:mod:`ctxbench.metrics.judges.panel`); left
    unset, the dataset's own judge (``dataset=longmemeval``: ``longmemeval``), else ``mem0``."""
    # dataset=longmemeval: its judge; score's dataset= may be left out (conf/score.yaml: dataset: null)
    judge = judge_panel.with_dataset_judge(cfg.judge, cfg.get("dataset"))
    if judge is not None and judge.get("calibration"):  # a bad judges.json fails now, not after the answers
        from ctxbench.metrics.judges.leniency import load_calibration

        load_calibration(judge.calibration)
    return build_metrics(metric_names(cfg), llm=judge_panel.judge_llm(cfg, llm), judge=judge)


def metric_names(cfg: Any) -> list[str]:
    """``metrics=``, plus the dataset's own metrics (its loader's ``metrics``: ``ruler_match`` for
    ``dataset=ruler``) when ``metrics=`` is left at its default."""
    names = [str(m) for m in cfg.metrics]
    dataset = cfg.get("dataset")  # score's dataset= may be left out (conf/score.yaml: dataset: null)
    if dataset is None or names != default_metrics():
        return names
    from ctxbench.core.registry import UnknownName, get

    try:
        own = getattr(get("dataset", str(dataset.name)), "metrics", ())
    except UnknownName:
        return names
    return names + [m for m in own if m not in names]


def load_prediction_file(path: str | Path) -> list[dict[str, Any]]:
    """Lines {id, prediction, answer, category, [category_name, adversarial_answer, question, ...]}.

    Any problem is a :class:`DataError` naming the file, the line and the field; what each field
    accepts is in :mod:`ctxbench.data.predictions`.
    """
    from ctxbench.data.paths import resolve
    from ctxbench.data.predictions import read_prediction_lines

    p = resolve(path, what="predictions", hint=PREDICTIONS_HINT)
    if p.is_dir():  # an eval run folder: its predictions.jsonl
        if not (p / "predictions.jsonl").is_file():
            raise DataError(p, f"a folder without predictions.jsonl; {PREDICTIONS_HINT}")
        p = p / "predictions.jsonl"
    return read_prediction_lines(p)


def errata_of(cfg: Any) -> Any:
    """``dataset.errata`` resolved against ``dataset=`` (its loader reads the file), or None."""
    dataset = cfg.get("dataset")  # score's dataset= may be left out (conf/score.yaml: dataset: null)
    if not dataset or not dataset.get("errata"):  # only locomo's schema has errata
        return None
    from ctxbench.core.registry import build

    return getattr(build("dataset", dataset), "errata", None)


def score_main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench score predictions=FILE.jsonl [metrics=[...]] [dataset=locomo dataset.path=FILE
    dataset.errata=ERRATA] hydra.run.dir=DIR``; with ``format=mem0|zep|evermemos`` a published artifact
    (:mod:`ctxbench.referee`)."""
    if not cfg.predictions:
        raise DataError("score", "set predictions=FILE.jsonl", field="predictions")
    check_logger(cfg)
    fmt = str(cfg.format or "ctxbench")
    if fmt != "ctxbench":
        return score_artifact(cfg, fmt)
    records = load_prediction_file(cfg.predictions)
    metrics = metrics_of(cfg)
    out = run_dir(cfg)
    results = finalize(out, records, metrics, cfg, "score", with_cost=False,
                       extra={"predictions": str(cfg.predictions)}, progress=bool(cfg.progress),
                       errata=errata_of(cfg))
    log_results(cfg, out, "score")  # logger=wandb (ctxbench/runs/wandb_log.py)
    print(f"score: {summary_line(results, [m.name for m in metrics])} → {out}")
    return results


def format_metrics(cfg: Any, fmt: Any) -> list[str]:
    """``metrics=`` as given, or the format's own metrics when ``metrics=`` is left at its default."""
    given = [str(m) for m in cfg.metrics]
    if fmt.metrics and given == default_score_metrics():
        return list(fmt.metrics)
    return given


def default_score_metrics() -> list[str]:
    from ctxbench.config.schemas import command_schema
    from ctxbench.config.setting import defaults

    return list(defaults(command_schema("score"))["metrics"])


def score_artifact(cfg: Any, fmt_name: str) -> dict[str, Any]:
    """A published artifact: read in its format, matched to LoCoMo, scored, the import reported."""
    from ctxbench.data.paths import resolve
    from ctxbench.evaluation.finalize import RESULTS_MD
    from ctxbench.metrics.aggregate import record_question
    from ctxbench.referee.formats import get_format
    from ctxbench.referee.importer import console_lines, import_artifact, markdown_section, stored_check
    from ctxbench.runs.results import atomic_write_text

    path = resolve(cfg.predictions, what="predictions", hint=f"predictions= takes the {fmt_name} artifact file")
    if path.is_dir():
        raise DataError(path, f"is a folder; format={fmt_name} reads one artifact file")
    names = format_metrics(cfg, get_format(fmt_name)())
    dataset = cfg.get("dataset")  # format=mem0|zep|...: dataset=locomo may be left out, the importer names it
    records, metrics, block, judge, fmt = import_artifact(path, fmt_name, dataset, names)
    if fmt.stored_metrics:  # the stored per-question scores beside ctxbench's metric of the same code
        by_name = {m.name: m for m in metrics}
        scored = []
        for rec in records:
            q, row = record_question(rec), {"id": rec["id"]}
            for metric in fmt.stored_metrics.values():
                if metric in by_name:
                    v = by_name[metric].score(str(rec["prediction"]), q)
                    row[metric] = None if v is None else float(v)
            scored.append(row)
        block["stored_scores"] = stored_check(scored, {r["id"]: r["source"]["stored"] for r in records},
                                              fmt.stored_metrics)
    out = run_dir(cfg)
    extra = {"predictions": str(cfg.predictions), "import": block}
    if judge:
        extra["judge"] = judge
    results = finalize(out, records, metrics, cfg, "score", with_cost=False, extra=extra,
                       progress=bool(cfg.progress), errata=errata_of(cfg))
    md = (out / RESULTS_MD).read_text(encoding="utf-8")
    atomic_write_text(out / RESULTS_MD, md + markdown_section(block, judge))
    for line in console_lines(block):
        print(f"score: {line}")
    log_results(cfg, out, "score")  # logger=wandb (ctxbench/runs/wandb_log.py)
    print(f"score: {summary_line(results, [m.name for m in metrics])} → {out}")
    return results
