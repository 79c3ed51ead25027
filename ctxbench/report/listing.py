"""``python -m ctxbench ls``: everything registered, every config in each group, and every plug-in.

Plug-ins are listed from their metadata (entry points) or their source (``plugins=`` files): nothing is
imported, so ``ls`` answers without torch and without running plug-in code; a plug-in that cannot be
used (a name clash) is listed with its one-line problem.
"""
from __future__ import annotations

from typing import Any

from ctxbench.config.options import group_options
from ctxbench.core import registry
from ctxbench.core.plugins import KIND_GROUPS

GROUP_OF_KIND = {"model": "model", "method": "method", "memory": "memory", "dataset": "dataset",
                 "llm": "llm", "embedder": "embedder"}


def listing() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in registry.KINDS:
        names = registry.names(kind)
        group = GROUP_OF_KIND.get(kind)
        configs = group_options(group) if group else []
        plugs = registry.plugin_names(kind) if kind in KIND_GROUPS else {}
        if names or configs:
            out[kind] = {"registered": names, "configs": configs,
                         "plugins": [{"name": n, "source": p.source, "problem": p.problem, **p.provenance()}
                                     for n, p in sorted(plugs.items())]}
    for group in ("launcher", "logger", "experiment", "sweep"):
        out[group] = {"registered": [], "configs": group_options(group), "plugins": []}
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
        for p in entry["plugins"]:
            line = f"  plug-in {p['name']}: {p['source']} ({p['target']})"
            print(line + (f" — not usable: {p['problem']}" if p["problem"] else ""))
