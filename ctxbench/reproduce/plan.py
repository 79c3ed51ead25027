"""The cells of a stored paper table (or the rows of a board) as ctxbench commands, trainings first.

A table (``ctxbench/report/papers/<NAME>.yaml``) names, per cell, the experiment whose run fills it
and, for a trained method, the train experiment that makes its checkpoint (``trained_by``). Each
experiment runs once, in ``<out>/<its first cell>`` (an eval) or ``<out>/train/<experiment>`` (a
training); cells that share a training (ICAE Table 6 reads one pretraining) are one job, so
trainings are never run twice at once. A job is the unit the runner runs side by side, in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxbench.core.errors import CtxbenchError
from ctxbench.core.paths import conf_dir

SCALES = ("cpu", "paper")
#: a train experiment that fine-tunes another's checkpoint (its config says "add checkpoint=<pretrain run>")
STARTS_FROM = {"icae_pwc_finetune": "icae_pwc_pretrain"}
#: methods an eval reads from a trained checkpoint; a cell naming no ``trained_by`` (CCM's MetaICL and
#: DailyDialog tables have no train experiment) trains its method on its own scale's data:
#: ``train method=M +scale/<group>=<scale>`` (those scale files hold the training knobs for the cell)
TRAINED_METHODS = ("ccm_concat", "ccm_merge", "icae", "icae_finetune", "lococo")
DONE_FILE = {"train": "train_summary.json", "eval": "results.json"}


class ReproduceError(CtxbenchError):
    """A table, scale or cell that ``reproduce`` cannot run; one line, with the nearest names."""


@dataclass(frozen=True)
class Step:
    """One ``python -m ctxbench <command> <overrides> hydra.run.dir=<run_dir>``."""
    command: str
    overrides: tuple[str, ...]
    run_dir: Path

    def argv(self) -> list[str]:
        return [self.command, *self.overrides, f"hydra.run.dir={self.run_dir}"]

    def done(self) -> bool:
        """Finished: a training's train_summary.json, an eval's results.json (an interrupted one resumes)."""
        return (self.run_dir / DONE_FILE[self.command]).exists()


@dataclass
class Job:
    """A cell (or several sharing a training): its trainings, then its run, in one lane with one log."""
    name: str
    cells: list[str]
    steps: list[Step] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    """What the plan needs from conf/reproduce.yaml (its comments say what each one means; its defaults
    are there: the empty values here only spare a caller what it does not use)."""
    scale: str
    out: Path
    cells: tuple[str, ...] = ()
    train_steps: int | None = None
    overrides: tuple[str, ...] = ()
    train_overrides: tuple[str, ...] = ()
    checkpoints: dict[str, str] = field(default_factory=dict)
    first: tuple[str, ...] = ()


def experiment_info(name: str) -> dict[str, Any]:
    """``host`` (train | eval, its header line), scale ``group`` and ``method`` of conf/experiment/<name>.yaml."""
    from omegaconf import OmegaConf

    path = conf_dir() / "experiment" / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    host = next(ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("# host:"))
    info: dict[str, Any] = {"host": host, "group": None, "method": None}
    for entry in OmegaConf.to_container(OmegaConf.load(path)).get("defaults", []):
        for key, value in (entry.items() if isinstance(entry, dict) else ()):
            if key.startswith("/scale/") and info["group"] is None:
                info["group"] = key[len("/scale/"):]
            if key == "override /method":
                info["method"] = value
    return info


def scale_option(group: str, scale: str) -> str:
    """The group's option for a scale: ``paper`` is the group's big one (``full`` for a board's slice)."""
    options = {p.stem for p in (conf_dir() / "scale" / group).glob("*.yaml")}
    for option in ((scale,) if scale == "cpu" else ("paper", "full")):
        if option in options:
            return option
    raise ReproduceError(f"scale/{group} has no {scale!r} option (it has: {', '.join(sorted(options))})")


def entries(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A table's cells, a board's rows, or a ruler table's methods at each ratio, each with ``cell``
    (its name) and ``experiment``."""
    if table.get("kind") in ("board", "longmemeval"):  # longmemeval: published rows, none with an experiment
        return [{**row, "cell": row["row"]} for row in table["rows"]]
    if table.get("kind") == "ruler":
        return ratio_cells(table)
    return list(table["cells"])


def ratio_cells(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``kind: ruler`` table's cells: each method row at each of its ratios (the table's ``ratios``
    unless the row names its own), ``<row>_r<ratio>`` running ``experiment=<table>_<row> task.ratio=<ratio>``;
    ``ratio_scales: {RATIO: {scales: [...], skip: why}}`` runs a ratio at those scales only."""
    cells = []
    limited = {float(r): v for r, v in (table.get("ratio_scales") or {}).items()}
    for row in table["methods"]:
        for ratio in row.get("ratios", table["ratios"]):
            cell = {**{k: v for k, v in row.items() if k != "ratios"}, "cell": f"{row['row']}_r{float(ratio):g}",
                    "label": f"{row.get('label', row['row'])} @ {float(ratio):g}", "ratio": float(ratio),
                    "experiment": row.get("experiment", f"{table['name']}_{row['row']}"),
                    "overrides": [f"task.ratio={float(ratio):g}"]}
            if float(ratio) in limited and not row.get("scales"):  # a ratio the table runs at some scales only
                cell["scales"], cell["skip"] = list(limited[float(ratio)]["scales"]), limited[float(ratio)]["skip"]
            cells.append(cell)
    return cells


def not_run_at(cell: dict[str, Any], scale: str) -> str | None:
    """Why a cell whose ``scales`` leave out ``scale`` does not run there (its ``skip``), else None."""
    scales = cell.get("scales")
    if not scales or scale in scales:
        return None
    return f"scale={scale}: " + str(cell.get("skip") or f"runs at scale={'|'.join(map(str, scales))} only")


def check_choices(table_name: str, opts: Options, table: dict[str, Any]) -> None:
    from ctxbench.core.registry import suggest

    if opts.scale not in SCALES:
        raise ReproduceError(f"unknown scale {opts.scale!r}.{suggest(opts.scale, list(SCALES))}")
    names = [e["cell"] for e in entries(table)]
    for cell in opts.cells:
        if cell not in names:
            raise ReproduceError(f"table {table_name} has no cell {cell!r}.{suggest(cell, names, label='Cells')}")


def read_table(name: str) -> dict[str, Any]:
    """The stored table (an unknown name fails with the nearest ones, as ``report table=`` does)."""
    from ctxbench.report.runs import ReportError
    from ctxbench.report.tables import read_yaml

    try:
        return read_yaml(name)
    except ReportError as e:
        raise ReproduceError(str(e)) from None


def training(name: str, opts: Options, steps: list[Step], *, method_group: str | None = None) -> Path:
    """Add the steps that make train experiment ``name`` (or ``method=name`` at ``method_group``); its run folder."""
    if name in opts.checkpoints:
        return Path(opts.checkpoints[name])
    if method_group is None:
        group = experiment_info(name)["group"]
        args = [f"experiment={name}", f"scale/{group}={scale_option(group, opts.scale)}"]
        run_dir = opts.out / "train" / name
        if name in STARTS_FROM:
            args.append(f"checkpoint={training(STARTS_FROM[name], opts, steps)}")
    else:
        args = [f"method={name}", f"+scale/{method_group}={scale_option(method_group, opts.scale)}"]
        run_dir = opts.out / "train" / f"{name}_{method_group}"
    step = Step("train", tuple(args + train_steps(opts) + ["trainer.resume=auto", *opts.train_overrides]), run_dir)
    if step not in steps:
        steps.append(step)
    return run_dir


def train_steps(opts: Options) -> list[str]:
    return [] if opts.train_steps is None else [f"trainer.max_steps={opts.train_steps}"]


def cell_steps(cell: dict[str, Any], opts: Options) -> list[Step]:
    """The steps that fill one cell: the trainings its run reads, then the run (an eval, or a training)."""
    exp = cell["experiment"]
    info, steps = experiment_info(exp), []
    if info["host"] == "train":
        training(exp, opts, steps)
        return steps
    args = [f"experiment={exp}", f"scale/{info['group']}={scale_option(info['group'], opts.scale)}"]
    if cell.get("trained_by"):
        args.append(f"checkpoint={training(cell['trained_by'], opts, steps)}")
    elif info["method"] in TRAINED_METHODS:
        args.append(f"checkpoint={training(info['method'], opts, steps, method_group=info['group'])}")
    steps.append(Step("eval", tuple(args + list(cell.get("overrides") or ()) + list(opts.overrides)),
                      opts.out / cell["cell"]))
    return steps


def plan(table_name: str, opts: Options) -> tuple[list[Job], list[dict[str, Any]]]:
    """(jobs to run, cells that cannot run: no experiment, a setting ctxbench cannot run, or a cell
    whose ``scales`` leave this scale out: ``not_run`` says why)."""
    table = read_table(table_name)
    check_choices(table_name, opts, table)
    jobs: list[Job] = []
    by_experiment: dict[tuple[str, ...], Job] = {}
    idle = []
    for cell in entries(table):
        if opts.cells and cell["cell"] not in opts.cells:
            continue
        if not cell.get("experiment") or cell.get("not_comparable"):
            idle.append(cell)
            continue
        if not_run_at(cell, opts.scale):
            idle.append({**cell, "not_run": not_run_at(cell, opts.scale)})
            continue
        run_key = (cell["experiment"], *(cell.get("overrides") or ()))  # a ruler cell: one experiment per ratio
        if run_key in by_experiment:  # another cell of the same run (full_context beside a method)
            by_experiment[run_key].cells.append(cell["cell"])
            continue
        job = Job(cell["cell"], [cell["cell"]], cell_steps(cell, opts))
        sharing = next((j for j in jobs if any(s.command == "train" and s in j.steps for s in job.steps)), None)
        if sharing is not None:  # one lane per training: the second cell waits for it in the same job
            sharing.name += f"+{job.name}"
            sharing.cells += job.cells
            sharing.steps += [s for s in job.steps if s not in sharing.steps]
            job = sharing
        else:
            jobs.append(job)
        by_experiment[run_key] = job
    return ordered(jobs, opts.first), idle


def ordered(jobs: list[Job], first: tuple[str, ...]) -> list[Job]:
    """Jobs named in ``first`` (the longest, measured) start first, in that order; the rest in table order."""
    rank = {name: i for i, name in enumerate(first)}
    return sorted(jobs, key=lambda j: rank.get(j.name, len(rank)))
