"""A train run folder: where it is, whether it is finished, and the refusal to train over one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ctxbench.core.errors import ConfigError
from ctxbench.training import checkpoint as ck

SUMMARY = "train_summary.json"


def run_dir_of(cfg: DictConfig) -> Path:
    from ctxbench.runs.results import run_dir

    return run_dir(cfg, "outputs/train/run")


def refuse_overwrite(run_dir: Path) -> None:
    """A fresh start (``trainer.resume`` unset) into a folder that holds a training run would train
    from step 0 over its checkpoints and metrics.jsonl: refused, naming the folder and the ways on."""
    found = ck.list_checkpoints(run_dir / "checkpoints")
    summary = run_dir / SUMMARY
    if not found and not summary.exists():
        return
    what = f"checkpoints up to {found[-1].name}" if found else SUMMARY
    raise ConfigError(f"{run_dir} already holds a training run ({what}); trainer.resume is unset, so training "
                      "would restart from step 0 over it. Pass trainer.resume=auto to continue it (a finished "
                      "run is returned as it is), or choose a new hydra.run.dir")


def finished_run(run_dir: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """The summary of a finished run when ``trainer.resume=auto`` finds one, else None.

    Finished = train_summary.json at ``trainer.max_steps`` and a checkpoint at that step.
    """
    if str(cfg.trainer.resume) != "auto":
        return None
    summary_path = run_dir / SUMMARY
    found = ck.list_checkpoints(run_dir / "checkpoints")
    if not summary_path.exists() or not found:
        return None
    try:
        summary = json.loads(summary_path.read_text())
    except (ValueError, OSError, RecursionError):  # damaged: rewritten by finishing again
        return None
    total = int(cfg.trainer.max_steps)
    if not isinstance(summary, dict) or summary.get("step") != total or ck.step_of(found[-1]) != total:
        return None
    try:
        ck.verify(found[-1])
    except ck.CheckpointError as e:  # the final weights are damaged: not finished, resume redoes it
        print(f"warning: the run's final checkpoint is damaged ({e}); resuming to rewrite it")
        return None
    return summary
