"""``python -m ctxbench ls``: everything registered, and every config in each group."""
from __future__ import annotations

from typing import Any

from ctxbench.core import registry
from ctxbench.core.paths import conf_dir

CONF = conf_dir()
GROUP_OF_KIND = {"model": "model", "method": "method", "memory": "memory", "dataset": "dataset",
                 "llm": "llm", "embedder": "embedder"}


def listing() -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for kind in registry.KINDS:
        names = registry.names(kind)
        group = GROUP_OF_KIND.get(kind)
        configs = sorted(p.stem for p in (CONF / group).glob("*.yaml")) if group else []
        if names or configs:
            out[kind] = {"registered": names, "configs": configs}
    for group in ("launcher", "logger", "experiment", "sweep"):
        out[group] = {"registered": [], "configs": sorted(p.stem for p in (CONF / group).glob("*.yaml"))}
    return out


def main(cfg: Any) -> None:
    kinds = cfg.kind
    for kind, entry in listing().items():
        if kinds and kind != kinds:
            continue
        print(f"{kind}:")
        if entry["registered"]:
            print(f"  registered: {', '.join(entry['registered'])}")
        if entry["configs"]:
            print(f"  configs ({kind}=NAME): {', '.join(entry['configs'])}")
