"""``judge.panel=[mem0,zep,strict,...]``: every answer judged under every judge of the panel.

Metric names: ``llm_judge`` is the panel's first judge (``mem0`` by default, so existing results and
tables keep their meaning); with two or more judges each judge ``NAME`` also gives ``llm_judge_NAME``
(``llm_judge_NAME_runs`` / ``_std`` with ``judge.runs > 1``, as ``llm_judge``). The first judge's two
metrics share one memo, so each answer is judged once per run for both. A panel of two or more judges
adds ``llm_judge`` to ``metrics`` when it is not there (asking for a panel is asking for judging); a
panel of one judge changes nothing but which prompt ``llm_judge`` uses. Every judge's call has its own
call-cache key (its own prompt text).

:func:`build_panel` builds the judge metrics from the ``judge:`` block and the judge LLM;
:func:`panel_metrics` does it from a command's config and an LLM (:func:`judge_llm`), so every path
that scores records (``eval``, ``score predictions=``, an importer's ``score format=``) gets the
panel from the same config keys.
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.errors import ConfigError

JUDGE_METRIC = "llm_judge"
JUDGE_KEYS = ("runs", "temperature", "seed", "parse")  # passed to every judge of the panel


def judge_settings(judge_cfg: Any) -> Any:
    """A ``judge:`` block (a command's, or a partial mapping) filled from its schema (eval's ``judge``), so
    every key reads as a typed field; None stays None (a config with no judge block)."""
    if judge_cfg is None:
        return None
    from ctxbench.config.compose import section_config

    return section_config("eval", "judge", judge_cfg)


def panel_names(judge_cfg: Any) -> list[str]:
    """The judges of ``judge.panel`` (unset: ``[mem0]``; :func:`with_dataset_judge` first puts a dataset's own
    judge there), checked: known names, no repeats, not empty."""
    from ctxbench.metrics.judge import DEFAULT_JUDGE, get_judge

    judge_cfg = judge_settings(judge_cfg)
    raw = None if judge_cfg is None else judge_cfg.panel
    if raw is None:
        return [DEFAULT_JUDGE]
    names = [str(raw)] if isinstance(raw, str) else [str(n) for n in raw]
    if not names:
        raise ConfigError("judge.panel=[]: name at least one judge (e.g. judge.panel=[mem0,zep,strict])")
    seen = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"judge.panel: {n!r} is named twice")
        seen.add(n)
        get_judge(n)
    return names


def dataset_judge(dataset_cfg: Any) -> str | None:
    """The judge a dataset's loader declares as its own (``judge = "longmemeval"`` on the registered
    loader, as ``metrics`` declares its own metrics), or None."""
    from ctxbench.core.registry import UnknownName, get

    if dataset_cfg is None or not dataset_cfg.name:
        return None
    try:
        own = getattr(get("dataset", str(dataset_cfg.name)), "judge", None)
    except UnknownName:
        return None
    return None if own is None else str(own)


def with_dataset_judge(judge_cfg: Any, dataset_cfg: Any) -> Any:
    """``judge_cfg`` with ``panel`` = [the dataset's own judge] when ``judge.panel`` is unset (null) and the
    dataset declares one (:func:`dataset_judge`: LongMemEval's per-type judge on ``dataset=longmemeval``);
    else ``judge_cfg`` as it is (``panel_names`` then defaults to ``mem0``)."""
    own = dataset_judge(dataset_cfg)
    judge_cfg = judge_settings(judge_cfg)
    if own is None or (judge_cfg is not None and judge_cfg.panel is not None):
        return judge_cfg
    from omegaconf import OmegaConf

    return OmegaConf.merge(judge_settings(judge_cfg or {}), {"panel": [own]})


def judge_metric_name(judge: str) -> str:
    return f"{JUDGE_METRIC}_{judge}"


def panel_metric_names(panel: list[str]) -> list[str]:
    """``llm_judge`` and, for a panel of two or more, ``llm_judge_<name>`` per judge."""
    return [JUDGE_METRIC] + ([judge_metric_name(n) for n in panel] if len(panel) > 1 else [])


def with_panel(metric_names: list[str], judge_cfg: Any) -> list[str]:
    """``metrics=`` plus ``llm_judge`` when the panel has two or more judges and it is missing."""
    names = [str(m) for m in metric_names]
    if JUDGE_METRIC not in names and len(panel_names(judge_cfg)) > 1:
        names.append(JUDGE_METRIC)
    return names


def build_panel(llm: Any, judge_cfg: Any) -> list[Any]:
    """The judge metrics of ``judge_cfg`` (``panel``, ``runs``, ``temperature``, ``seed``) on ``llm``."""
    from ctxbench.metrics.judge import LLMJudge

    panel = panel_names(judge_cfg)
    judge_cfg = judge_settings(judge_cfg)
    opts = {k: judge_cfg[k] for k in JUDGE_KEYS if judge_cfg is not None and judge_cfg[k] is not None}
    first_memo: dict[Any, Any] = {}
    out = [LLMJudge(llm=llm, judge=panel[0], name=JUDGE_METRIC, memo=first_memo, **opts)]
    if len(panel) > 1:
        out += [LLMJudge(llm=llm, judge=n, name=judge_metric_name(n), memo=first_memo if i == 0 else None, **opts)
                for i, n in enumerate(panel)]
    return out


def judge_llm(cfg: Any, llm: Any = None, force: bool = False) -> Any:
    """The LLM the judges judge with: ``judge_llm=`` (built), else ``llm`` (the evaluated system's when
    given, else built from the config); None when nothing is judged (no ``llm_judge`` in ``metrics`` and
    a panel of one), unless ``force``."""
    from ctxbench.config.compose import option_config
    from ctxbench.core.registry import build
    from ctxbench.data.errors import DataError
    from ctxbench.llm.base import preflight

    if not force and JUDGE_METRIC not in with_panel(list(cfg.metrics or []), cfg.judge):
        return None
    judge_cfg = option_config("llm", cfg.judge_llm) if cfg.judge_llm else cfg.llm  # a user's mapping
    if judge_cfg is None:
        raise DataError("metrics", "llm_judge needs a judge LLM: set judge_llm or llm", field="llm_judge")
    if llm is not None and cfg.judge_llm is None:
        return llm
    judge = build("llm", judge_cfg)
    preflight(judge)
    return judge


def panel_metrics(cfg: Any, llm: Any = None) -> list[Any]:
    """The judge metrics of a command's config alone (``judge:``, ``judge_llm``, ``llm``), whatever
    ``metrics=`` says, on ``llm`` (when given and ``judge_llm`` is unset) or the judge LLM the config
    builds: for records scored outside ``eval`` (``report judges``, an importer's records)."""
    dataset = cfg.get("dataset")  # score's dataset= may be left out (conf/score.yaml: dataset: null)
    return build_panel(judge_llm(cfg, llm, force=True), with_dataset_judge(cfg.judge, dataset))
