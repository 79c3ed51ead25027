"""Run-folder configs for board tests: what an eval of a locomo_all row's experiment records (the
system, dataset, task and answer prompt the board matches runs by)."""
from __future__ import annotations

from typing import Any

from ctxbench.report.tables import read_yaml


def row_system(experiment: str) -> str:
    """``memory=rag`` / ``method=snapkv``: the system of the locomo_all row ``experiment`` makes (another
    experiment: ``memory=rag``)."""
    return next((r["system"] for r in read_yaml("locomo_all")["rows"] if r.get("experiment") == experiment),
                "memory=rag")


def eval_config(system: str, dataset: str = "locomo", experiment: str | None = None, **extra: Any) -> dict[str, Any]:
    """The recorded config of an eval of ``system`` (``memory=NAME`` / ``method=NAME``) on ``dataset``."""
    group, _, name = system.partition("=")
    config: dict[str, Any] = {"seed": 0, "task": {"name": "qa"}, "qa_prompt": "brief", "dataset": {"name": dataset},
                              "memory": {"name": "full_context"}, group: {"name": name}, **extra}
    if group == "method":
        config["method"] = {"name": name}
    if experiment:
        config["experiment"] = {"name": experiment, "table": "locomo_all"}
    return config


def results_extra(system: str, dataset: str = "locomo") -> dict[str, Any]:
    """results.json's ``system`` and ``dataset`` (as the evaluator writes them)."""
    return {"system": system, "dataset": dataset}
