"""metrics.jsonl (rank 0) and its mirror in the accelerator's tracker (wandb, ``logger=wandb``)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ctxbench.runs.results import JsonlAppender, atomic_write_text
from ctxbench.runs.wandb_log import WANDB_ID, wandb_run_id  # noqa: F401  (one wandb id per run folder, eval's too)


class MetricsLog:
    """metrics.jsonl (rank 0), mirrored to the accelerator's tracker (wandb) when ``logger=wandb``.

    On resume the lines past the checkpoint are dropped; a torn last line (a crash mid-write) is
    dropped too, a malformed line before it is a one-line error naming the file and the line.
    The tracker run is closed by ``accelerator.end_training()``.
    """

    def __init__(self, run_dir: Path, cfg: DictConfig, enabled: bool, resume_step: int, say=print, acc: Any = None):
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self.acc = None  # the accelerator whose trackers mirror the records
        self.last_loss: float | None = None  # the last logged loss at or before resume_step
        if not enabled:
            return
        if self.path.exists():
            keep = self._kept_rows(resume_step, say)
            losses = [r["loss"] for r in keep if r.get("loss") is not None]
            self.last_loss = losses[-1] if losses else None
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))
        if acc is not None and acc.log_with:
            start_tracker(acc, cfg, run_dir)
            self.acc = acc

    def _kept_rows(self, resume_step: int, say) -> list[dict[str, Any]]:
        """The records at or before ``resume_step`` (none for a fresh start)."""
        if resume_step <= 0:
            return []
        from ctxbench.data.errors import DataError
        from ctxbench.runs.results import read_jsonl_tolerant

        rows, dropped = read_jsonl_tolerant(self.path)
        if dropped:
            say(f"warning: {self.path}: dropped a torn last line (a crash mid-write)")
        for i, r in enumerate(rows, 1):  # read_jsonl_tolerant already refused lines that are no object
            if not isinstance(r.get("step", 0), int) or isinstance(r.get("step"), bool):
                raise DataError(self.path, "expected a JSON object with an integer step; fix or delete the line "
                                           "to resume", record=f"line {i}")
            loss = r.get("loss")
            if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)):
                raise DataError(self.path, f"loss is {json.dumps(loss)[:40]}, expected a number; fix or delete the "
                                           "line to resume", record=f"line {i}", field="loss")
        return [r for r in rows if r.get("step", 0) <= resume_step]

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with JsonlAppender(self.path) as log:
            log.append(record)
        if self.acc is not None:
            self.acc.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


def start_tracker(acc: Any, cfg: DictConfig, run_dir: Path) -> None:
    """``accelerator.init_trackers`` for wandb: one run id per run folder (``wandb_id``, reused on
    resume), files under the run folder, ``WANDB_MODE`` over ``logger.mode``, the config redacted."""
    from ctxbench.core.secrets import redact

    run_id = wandb_run_id(run_dir)
    mode = os.environ.get("WANDB_MODE") or cfg.logger.mode
    init = {"entity": cfg.logger.entity, "id": run_id, "resume": "allow", "dir": str(run_dir), "mode": mode,
            "tags": list(cfg.logger.tags)}
    acc.init_trackers(str(cfg.logger.project),
                      config=redact(OmegaConf.to_container(cfg, resolve=True)), init_kwargs={"wandb": init})
