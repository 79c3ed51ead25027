"""``python -m ctxbench score``: the metrics of a predictions file, and the metrics ``eval`` scores with.

``metrics=`` (and, for ``llm_judge``, the judge LLM) are built from the config before any question is
answered, so a bad metric or an unreachable judge fails at once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.config.compose import option_config
from ctxbench.data.errors import DataError
from ctxbench.evaluation.finalize import finalize, summary_line
from ctxbench.llm.base import preflight
from ctxbench.metrics.base import Metric, build_metrics
from ctxbench.runs.results import run_dir


def default_metrics() -> list[str]:
    """evaluate_samples' metrics when given none: the eval schema's (built when asked, not at import)."""
    from ctxbench.config.schemas import command_schema
    from ctxbench.config.setting import defaults

    return list(defaults(command_schema("eval"))["metrics"])


PREDICTIONS_HINT = ("predictions= takes the predictions.jsonl that `python -m ctxbench eval` writes in its run folder "
                    "(outputs/eval/<run>/predictions.jsonl, or that folder)")


def judge_llm(cfg: Any, llm: Any = None) -> Any:
    """The LLM ``llm_judge`` judges with (``judge_llm=``, else ``llm``; None without that metric)."""
    if "llm_judge" not in [str(m) for m in cfg.metrics]:
        return None
    from ctxbench.core.registry import build

    judge_cfg = option_config("llm", cfg.judge_llm) if cfg.judge_llm else cfg.llm  # a user's mapping, filled
    if judge_cfg is None:
        raise DataError("metrics", "llm_judge needs a judge LLM: set judge_llm or llm", field="llm_judge")
    if llm is not None and cfg.judge_llm is None:
        return llm
    judge = build("llm", judge_cfg)
    preflight(judge)
    return judge


def metrics_of(cfg: Any, llm: Any = None) -> list[Metric]:
    """The metrics of ``metrics=``, with their judge LLM (``llm``, the evaluated system's, if no judge_llm)."""
    return build_metrics([str(m) for m in cfg.metrics], llm=judge_llm(cfg, llm), judge=cfg.judge)


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
    dataset = cfg.get("dataset")
    if not dataset or not dataset.get("errata"):
        return None
    from ctxbench.core.registry import build

    return getattr(build("dataset", dataset), "errata", None)


def score_main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench score predictions=FILE.jsonl [metrics=[...]] [dataset=locomo dataset.path=FILE
    dataset.errata=ERRATA] hydra.run.dir=DIR``."""
    if not cfg.predictions:
        raise DataError("score", "set predictions=FILE.jsonl", field="predictions")
    records = load_prediction_file(cfg.predictions)
    metrics = metrics_of(cfg)
    out = run_dir(cfg)
    results = finalize(out, records, metrics, cfg, "score", with_cost=False,
                       extra={"predictions": str(cfg.predictions)}, progress=bool(cfg.progress),
                       errata=errata_of(cfg))
    print(f"score: {summary_line(results, [m.name for m in metrics])} → {out}")
    return results
