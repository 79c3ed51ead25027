"""The last words of ``train``: how the losses moved, where the results are, what to run next."""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any


def loss_curve(metrics_path: Path) -> tuple[list[float], list[tuple[int, float]]]:
    """(train losses, (step, held-out loss) pairs) from metrics.jsonl; torn or odd lines are skipped."""
    train, held = [], []
    try:
        lines = metrics_path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return [], []
    for line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(r, dict):
            continue
        if isinstance(r.get("loss"), (int, float)):
            train.append(float(r["loss"]))
        if isinstance(r.get("eval_loss"), (int, float)) and not r.get("final"):
            held.append((int(r.get("step", 0)), float(r["eval_loss"])))
    return train, held


def eval_dataset(method: str) -> str:
    """The shipped sample a trained method is evaluated on first (ICAE answers PwC, the rest LoCoMo)."""
    return "pwc_sample" if method.startswith("icae") else "locomo_sample"


def done_message(run_dir: Path, step: int, final_eval: float | None, method: str, checkpoint: str | None) -> str:
    """Three lines: ``done:`` with the losses, ``results:`` with the files, ``next:`` with the eval command."""
    train, held = loss_curve(run_dir / "metrics.jsonl")
    parts = [f"done: {step} steps"]
    if train:
        k = max(1, min(5, len(train) // 3))  # one batch's loss is noisy: the mean of the first and last k steps
        first, last = sum(train[:k]) / k, sum(train[-k:]) / k
        parts.append(f"train loss {first:.2f} → {last:.2f}" + (f" (mean of {k} steps)" if k > 1 else ""))
    if held and len(held) > 1:
        parts.append(f"held-out loss {held[0][1]:.2f} (step {held[0][0]}) → {held[-1][1]:.2f} (step {held[-1][0]})")
    elif final_eval is not None:
        parts.append(f"held-out loss {final_eval:.2f}")
    else:
        parts.append("no held-out loss (too few examples to hold some out; see trainer.eval_fraction)")
    files = ["metrics.jsonl", "train_summary.json"] + ([f"checkpoints/{checkpoint}"] if checkpoint else [])
    run = shlex.quote(str(run_dir))
    return "\n".join([
        ", ".join(parts),
        f"results: {run_dir}/ — " + ", ".join(files),
        f"next: python -m ctxbench eval method={method} checkpoint={run} dataset={eval_dataset(method)} limit=5",
    ])


def latest_checkpoint_name(run_dir: Path) -> str | None:
    from ctxbench.training.checkpoint import list_checkpoints

    found = list_checkpoints(run_dir / "checkpoints")
    return found[-1].name if found else None


def print_done(say: Any, run_dir: Path, step: int, final_eval: float | None, method: str) -> None:
    say(done_message(run_dir, step, final_eval, method, latest_checkpoint_name(run_dir)))
