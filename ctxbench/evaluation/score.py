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
from ctxbench.metrics.judges.panel import panel_metrics  # noqa: F401 - the panel from (cfg, llm), for importers
from ctxbench.metrics.base import Metric, build_metrics
from ctxbench.runs.results import run_dir


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
    ``judge.panel`` makes one ``llm_judge`` metric per judge (:mod:`ctxbench.metrics.judges.panel`)."""
    judge = cfg.get("judge")
    if judge is not None and judge.get("calibration"):  # a bad judges.json fails now, not after the answers
        from ctxbench.metrics.judges.leniency import load_calibration

        load_calibration(judge.calibration)
    return build_metrics([str(m) for m in cfg.metrics], llm=judge_panel.judge_llm(cfg, llm), judge=judge)


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


def score_main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench score predictions=FILE.jsonl [metrics=[...]] hydra.run.dir=DIR``."""
    if not cfg.predictions:
        raise DataError("score", "set predictions=FILE.jsonl", field="predictions")
    records = load_prediction_file(cfg.predictions)
    metrics = metrics_of(cfg)
    out = run_dir(cfg)
    results = finalize(out, records, metrics, cfg, "score", with_cost=False,
                       extra={"predictions": str(cfg.predictions)}, progress=bool(cfg.progress))
    print(f"score: {summary_line(results, [m.name for m in metrics])} → {out}")
    return results
