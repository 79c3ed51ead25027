"""``python -m ctxbench <command> --help``: the command, its config groups and its composed config.

Hydra's own help lists each group's options by building a config repository per group (a deep copy
of the ConfigStore each time: 7–8 s here); this reads the option files from ``conf/`` and composes
the command's config once, with the overrides given (``eval method=icae --help`` shows that config).
``--hydra-help`` is still Hydra's.
"""
from __future__ import annotations

from pathlib import Path

DESCRIPTIONS = {
    "train": "train a compression method (ICAE, CCM, LoCoCo, LoRA-LM) on a dataset",
    "eval": "evaluate a compression method or a memory system on a dataset's questions",
    "score": "score predictions again, or score a published artifact (format=mem0|zep|evermemos|longmemeval)",
    "bench": "benchmark suites: speed and memory, as ratios measured in one run",
    "report": "tables from run folders: leaderboard, paper tables, comparisons, sweeps",
    "data": "download, check and describe datasets (data download NAME, data stats NAME)",
    "ls": "list every registered name and every config group's options",
    "export": "package a trained checkpoint for the hub",
    "reproduce": "rebuild a paper's table with one command (reproduce table=NAME scale=cpu|paper)",
    "view": "one HTML page to browse a run's answers, or two runs side by side (view RUN [RUN_B])",
}
#: groups that are the config's own machinery, not options a user picks
INTERNAL = ("schema", "hydra")


def group_options(conf_dir: Path) -> dict[str, list[str]]:
    """group path (``scale/lococo``) → its options, for every folder of YAML files under ``conf_dir``."""
    out: dict[str, list[str]] = {}
    for folder in sorted(p for p in conf_dir.rglob("*") if p.is_dir()):
        group = folder.relative_to(conf_dir).as_posix()
        if group.split("/")[0] in INTERNAL:
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        if options:
            out[group] = options
    return out


def plugin_options() -> dict[str, list[str]]:
    """group → the installed plug-ins' names it can select (read from their metadata, nothing imported)."""
    from ctxbench.config.plugin_options import GROUP_OF_KIND
    from ctxbench.core.registry import plugin_names

    return {group: [n for n, p in plugin_names(kind).items() if p.problem is None] for kind, group in GROUP_OF_KIND.items()}


def plugin_settings(overrides: list[str]) -> list[str]:
    """``== Settings of memory=lastturns (lastturns-pkg 0.2.0) ==`` and each key: type, default, bound, meaning."""
    import dataclasses

    from ctxbench.config.plugin_options import GROUP_OF_KIND
    from ctxbench.config.schemas import schemas_named
    from ctxbench.config.setting import defaults
    from ctxbench.core.registry import plugin_of

    lines: list[str] = []
    for arg in overrides:
        group, _, name = arg.partition("=")
        p = plugin_of(group, name) if group in GROUP_OF_KIND else None
        if p is None:
            continue
        schema = schemas_named(group, name)[0]
        values = defaults(schema)
        lines += ["", f"== Settings of {group}={name} (plug-in: {p.source}) ==", ""]
        for f in dataclasses.fields(schema):
            if f.name == "name":
                continue
            meta = f.metadata
            bound = meta.get("range").describe() if meta.get("range") else ""
            choices = f"one of {', '.join(map(str, meta['choices']))}" if meta.get("choices") else ""
            typ = getattr(f.type, "__name__", None) or str(f.type)
            extra = "; ".join(x for x in (bound, choices, meta.get("meaning", "")) if x)
            lines.append(f"{group}.{f.name}: {typ} = {values[f.name]!r}" + (f"  {extra}" if extra else ""))
    return lines


def help_text(command: str, overrides: list[str], conf_dir: Path) -> str:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir), job_name=command):
        cfg = compose(config_name=command, overrides=overrides)
    lines = [f"python -m ctxbench {command} [-m] [key=value ...]: {DESCRIPTIONS.get(command, '')}", "",
             "== Config groups (group=option) ==", ""]
    options = group_options(conf_dir)
    for group, names in plugin_options().items():
        options[group] = sorted(set(options.get(group, [])) | set(names))
    lines += [f"{group}: {', '.join(opts)}" for group, opts in options.items()]
    lines += plugin_settings(overrides)
    lines += ["", "== Config" + (f" (with {' '.join(overrides)})" if overrides else "")
              + " ==  every key, its type, default and bound: docs/config.md", "",
              OmegaConf.to_yaml(cfg).rstrip(), "",
              "Registered names: python -m ctxbench ls.  Hydra's own flags: --hydra-help."]
    return "\n".join(lines)
