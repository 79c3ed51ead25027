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


def help_text(command: str, overrides: list[str], conf_dir: Path) -> str:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir), job_name=command):
        cfg = compose(config_name=command, overrides=overrides)
    lines = [f"python -m ctxbench {command} [-m] [key=value ...]: {DESCRIPTIONS.get(command, '')}", "",
             "== Config groups (group=option) ==", ""]
    lines += [f"{group}: {', '.join(options)}" for group, options in group_options(conf_dir).items()]
    lines += ["", "== Config" + (f" (with {' '.join(overrides)})" if overrides else "")
              + " ==  every key, its type, default and bound: docs/config.md", "",
              OmegaConf.to_yaml(cfg).rstrip(), "",
              "Registered names: python -m ctxbench ls.  Hydra's own flags: --hydra-help."]
    return "\n".join(lines)
