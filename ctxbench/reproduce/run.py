"""Run a plan's jobs, ``jobs`` lanes side by side, each job's output in ``<logs>/<job>.log``.

A job runs its steps in order and stops at the first that fails; a finished step (its
train_summary.json or results.json is there) is skipped, so rerunning the same command resumes:
an interrupted training resumes from its last checkpoint (``trainer.resume=auto``), an interrupted
eval from the predictions already in its run folder. Every lane gets ``cores / jobs`` threads
(``OMP_NUM_THREADS``, unless set): on 2 cores two one-thread rows finish 1.6x sooner than one
two-thread row after another.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, TextIO

from ctxbench.reproduce.plan import Job, Step

#: ``runner(step, prefix, log, env) -> exit code``: how one step runs (tests pass a fast fake)
Runner = Callable[[Step, list[str], TextIO, dict[str, str]], int]


def subprocess_runner(step: Step, prefix: list[str], log: TextIO, env: dict[str, str]) -> int:
    """The step as its own ``python -m ctxbench`` process (cells are long and isolated), output to the log."""
    return subprocess.run(prefix + step.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, check=False).returncode


def command_prefix(step: Step, launch: str | None) -> list[str]:
    """``python -m ctxbench``, or for a training the ``launch`` prefix (``accelerate launch ... -m ctxbench``)."""
    if step.command == "train" and launch:
        return shlex.split(launch)
    return [sys.executable, "-m", "ctxbench"]


def shell_line(step: Step, launch: str | None) -> str:
    return shlex.join(command_prefix(step, launch) + step.argv())


def lane_env(lanes: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // lanes)))
    return env


def run_job(job: Job, log_path: Path, launch: str | None, env: dict[str, str], runner: Runner) -> int:
    """The job's steps in order (finished ones skipped); the first non-zero exit code, else 0."""
    from tqdm import tqdm

    tqdm.write(f"== {job.name} (log: {log_path}; {env['OMP_NUM_THREADS']} thread(s))", file=sys.stderr)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        for step in job.steps:
            line = shell_line(step, launch)
            if step.done():
                print(f"== finished, skipped: {line}", file=log, flush=True)
                continue
            print(f"== {line}", file=log, flush=True)
            rc = runner(step, command_prefix(step, launch), log, env)
            if rc != 0:
                return rc
    return 0


def run_jobs(jobs: list[Job], *, lanes: int, logs: Path, launch: str | None = None,
             runner: Runner = subprocess_runner, progress: bool = True) -> list[tuple[str, int]]:
    """Every job, ``lanes`` at a time in the given order; the (name, exit code) of each that failed."""
    from tqdm import tqdm

    env = lane_env(lanes)
    failed: list[tuple[str, int]] = []
    bar = tqdm(total=len(jobs), desc="cells", unit="cell", disable=not progress, file=sys.stderr)
    pool = ThreadPoolExecutor(max_workers=max(1, lanes))
    futures = {pool.submit(run_job, job, logs / f"{job.name}.log", launch, env, runner): job for job in jobs}
    try:
        for fut in as_completed(futures):
            job, rc = futures[fut], fut.result()
            if rc == 0:
                bar.write(f"-- {job.name} done", file=sys.stderr)
            else:
                failed.append((job.name, rc))
                log = logs / f"{job.name}.log"
                bar.write(f"!! {job.name} failed (exit {rc}): {log}{last_error(log)}", file=sys.stderr)
            bar.update(1)
    finally:  # Ctrl-C: the running cells got it too; start no other
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return failed


def last_error(log: Path) -> str:
    """The log's last ``ctxbench: error:`` line (what a one-line failure said), or nothing."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    err = next((ln for ln in reversed(lines) if ln.startswith("ctxbench: error:")), None)
    return f" ({err})" if err else ""
