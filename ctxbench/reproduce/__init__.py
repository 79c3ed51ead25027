"""``python -m ctxbench reproduce table=NAME [scale=cpu|paper] [jobs=N] [dry_run=true]``.

Runs (or resumes) every cell a stored paper table names, trainings first, each in its own run folder
under one output root, then prints ``report table=NAME`` over those runs. plan.py turns the table
into jobs of ctxbench commands, run.py runs them; conf/reproduce.yaml says what each key means.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.reproduce.plan import Job, Options, ReproduceError, plan
from ctxbench.reproduce.run import Runner, run_jobs, shell_line, subprocess_runner


def options(cfg: Any) -> Options:
    scale = str(cfg.table_scale)
    first = tuple(cfg.first or ())
    steps = cfg.train_steps if cfg.train_steps is not None or scale != "cpu" else cfg.cpu_train_steps.get(
        str(cfg.table), cfg.cpu_train_steps["default"])
    return Options(scale=scale, out=out_root(cfg), cells=tuple(str(c) for c in (cfg.cells or ())),
                   train_steps=steps, overrides=tuple(map(str, cfg.overrides or ())),
                   train_overrides=tuple(map(str, cfg.train_overrides or ())),
                   checkpoints={str(k): str(v) for k, v in (cfg.checkpoints or {}).items()}, first=first)


def out_root(cfg: Any) -> Path:
    return Path(cfg.out) if cfg.out else Path("outputs/reproduce") / f"{cfg.table}_{cfg.table_scale}"


def print_plan(table: str, jobs: list[Job], idle: list[dict[str, Any]], opts: Options, launch: str | None) -> None:
    print(f"reproduce {table} (scale={opts.scale}) into {opts.out}: {len(jobs)} job(s)")
    for job in jobs:
        print(f"\n[{job.name}] cells: {', '.join(job.cells)}")
        for step in job.steps:
            print(("  (finished) " if step.done() else "  ") + shell_line(step, launch))
    for cell in idle:
        why = cell.get("not_run") or cell.get("not_comparable") or cell.get("no_experiment") or "no experiment config"
        print(f"\nnot run: {cell['cell']} ({why})")
    print(f"\nthen: python -m ctxbench report table={table} runs={opts.out} out={opts.out / (table + '.md')}")


def main(cfg: Any, runner: Runner = subprocess_runner) -> dict[str, Any] | None:
    if not cfg.table:
        from ctxbench.report.tables import table_names

        raise ReproduceError("reproduce needs table=NAME: one of " + ", ".join(table_names(None)))
    if int(cfg.jobs) < 1:
        raise ReproduceError(f"jobs={cfg.jobs}: run at least 1 job at a time")
    if cfg.train_steps is not None and int(cfg.train_steps) < 1:
        raise ReproduceError(f"train_steps={cfg.train_steps}: train at least 1 step (null = the scale's own)")
    table, opts = str(cfg.table), options(cfg)
    jobs, idle = plan(table, opts)
    if cfg.dry_run:
        print_plan(table, jobs, idle, opts, cfg.launch)
        return None
    logs = Path(cfg.logs) if cfg.logs else opts.out / "logs"
    failed = run_jobs(jobs, lanes=int(cfg.jobs), logs=logs, launch=cfg.launch, runner=runner,
                      progress=bool(cfg.progress))
    if failed:
        order = {job.name: i for i, job in enumerate(jobs)}  # in plan order, whatever order they ended in
        failed = sorted(failed, key=lambda f: order.get(f[0], len(order)))
        names = ", ".join(f"{name} (exit {rc})" for name, rc in failed)
        raise ReproduceError(f"cells failed: {names} (their logs are in {logs}; a rerun resumes)")
    return report(table, opts.out)


def report(table: str, out: Path) -> dict[str, Any]:
    """What ``report table=NAME runs=<out> out=<out>/<NAME>.md`` prints, over this root's runs."""
    from ctxbench.config.compose import command_config
    from ctxbench.report import main as report_main

    out.mkdir(parents=True, exist_ok=True)
    return report_main(command_config("report", {"table": table, "runs": str(out), "out": str(out / f"{table}.md")}))
