"""``suite=cli``: how long the command line takes to answer when it runs no job, and whether it imported torch.

Each command is a fresh ``python -m ctxbench ...`` process, as a user types it (wall time, median over
``repeats``, the commands interleaved so a busy moment of a shared machine hits them alike). Beside
them, ``python -c pass`` (the interpreter alone) and ``python -c "import torch"`` (what every command
paid before the registry read names from the source). ``torch`` says whether the process imported
torch (one more run under ``-X importtime``). Goal: ``ls`` and ``eval --cfg job`` within ``goal_s``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from ctxbench.bench.common import REPO_ROOT, median, rnd
from ctxbench.core.registry import register

#: label → argv after ``python``; the ones with a goal are marked in GOAL
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch'": ["-c", "import torch"],
    "ls": ["-m", "ctxbench", "ls"],
    "--help": ["-m", "ctxbench", "--help"],
    "eval --help": ["-m", "ctxbench", "eval", "--help"],
    "eval --cfg job": ["-m", "ctxbench", "eval", "--cfg", "job"],
    "train method=icae --cfg job": ["-m", "ctxbench", "train", "method=icae", "--cfg", "job"],
    "eval a bad key (one-line error)": ["-m", "ctxbench", "eval", "no_such_key=1"],
}
GOAL = ("ls", "eval --cfg job")


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}


def wall_time(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env=_env(), capture_output=True, timeout=600)
    return time.perf_counter() - t0


def imports_torch(argv: list[str]) -> bool:
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO_ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    return any(line.rstrip().endswith("| torch") for line in proc.stderr.splitlines())


@register("bench", "cli")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for _ in range(int(cfg.repeats)):
        for label, argv in COMMANDS.items():
            times[label].append(wall_time(argv))
    goal = float(cfg.goal_s)
    rows = []
    for label, argv in COMMANDS.items():
        s = median(times[label])
        rows.append({"command": label, "seconds": rnd(s, 2), "torch": imports_torch(argv) if "ctxbench" in argv else "",
                     "goal_s": goal if label in GOAL else "", "met": (s <= goal) if label in GOAL else ""})
    return {"rows": rows, "columns": [["command", "command"], ["seconds", "s (median)"], ["torch", "imports torch"],
                                  ["goal_s", "goal s"], ["met", "met"]],
            "params": {"repeats": int(cfg.repeats), "python": sys.version.split()[0]},
            "notes": ["wall time of a fresh process, median over repeats, commands interleaved"]}
