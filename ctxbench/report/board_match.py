"""Which run fills which board row: by system, dataset and settings — never by ``experiment.name``.

Every run folder found below ``runs=`` (results.json + its recorded config) is taken newest first
(results.json ``created``). A run fills the row whose ``system`` (results.json ``system``:
``memory=rag`` / ``method=snapkv``) and ``dataset`` it has and whose every pinned setting (the board's
``settings`` and the row's: dotted config keys) its config holds; of several such rows, the one pinning
most keys. Each run gets one line saying which row it filled or why it was skipped: not an eval run, no
QA scores (another task), a failed run, another dataset, settings that differ (the first key), a
duplicate of a row already filled by a newer run.

A run of a system that no row names fills a row of its own when ``add_unmatched`` is on (a plug-in's
memory system beside the built-ins): labelled by its system's name and the system settings it was run
with (its ``memory.*`` / ``method.*`` overrides), marked "added from runs", one row per distinct setting.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxbench.report.runs import Run, config_value, created


@dataclass
class Matched:
    """The outcome: a run per board row id, the rows added from runs (specs, as board rows), one line per run."""

    runs: dict[str, Run] = field(default_factory=dict)
    added: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def run_system(run: Run) -> str | None:
    """``memory=NAME`` / ``method=NAME``: results.json ``system``, else the recorded config's method or memory."""
    sysname = (run.results or {}).get("system")
    if isinstance(sysname, str) and "=" in sysname:
        return sysname
    for group in ("method", "memory"):  # a method= run records its memory default too: method first
        node = run.config.get(group)
        if isinstance(node, dict) and node.get("name"):
            return f"{group}={node['name']}"
    return None


def run_dataset(run: Run) -> str | None:
    ds = (run.results or {}).get("dataset")
    if ds:
        return str(ds)
    node = run.config.get("dataset")
    return str(node["name"]) if isinstance(node, dict) and node.get("name") else None


def same(a: Any, b: Any) -> bool:
    """A recorded value equals a pinned one: numbers by value (128 == 128.0), lists item by item,
    mappings key by key, anything else by its text (``true`` pinned as a string matches True)."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    return str(a) == str(b)


def differs(run: Run, settings: dict[str, Any]) -> str | None:
    """``KEY (run V, board W)`` for the first pinned setting the run's config does not hold, else None."""
    for key, want in settings.items():
        got = config_value(run.config, key)
        if not same(got, want):
            return f"{key} (run {got!r}, board {want!r})"
    return None


def screen(run: Run) -> str | None:
    """Why a run cannot fill any row whatever its system: not an eval run, no QA scores, a failed run."""
    if run.kind != "eval":
        return f"not an eval run ({run.kind})"
    res = run.results or {}
    if not res.get("overall"):
        task = config_value(run.config, "task.name") or res.get("task")
        return f"no QA scores (task={task})" if task and task != "qa" else "no scores (results.json has no overall)"
    health = res.get("health") or {}
    if health.get("status") == "failed":
        return f"failed run ({health.get('reason') or 'health: failed'})"
    return None


def system_overrides(run: Run, system: str) -> list[str]:
    """The run's own settings of its system: its ``memory.*`` / ``method.*`` overrides, ``key=value``."""
    group = system.partition("=")[0]
    return sorted(f"{k.partition('.')[2]}={v}" for k, v in run.override_map().items()
                  if k.startswith(group + ".") and k != f"{group}.name")


def match_runs(board: dict[str, Any], runs: list[Run], add_unmatched: bool) -> Matched:
    """Fill the board's rows from ``runs`` (see the module doc); the lines say what each run did."""
    out = Matched()
    rows = board["rows"]
    datasets = {r["dataset"] for r in rows} | ({board["dataset"]} if board.get("dataset") else set())
    by_system: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_system.setdefault(r["system"], []).append(r)
    added: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
    for run in sorted(runs, key=created, reverse=True):  # newest first: the first to fill a row is kept
        where = str(run.path)
        why = screen(run)
        system, dataset = run_system(run), run_dataset(run)
        if why is None and system is None:
            why = "no system recorded (results.json system / config method, memory)"
        if why is None and dataset not in datasets:
            why = f"other dataset ({dataset}; board: {', '.join(sorted(datasets))})"
        if why is not None:
            out.lines.append(f"skipped {where}: {why}")
            continue
        candidates = [r for r in by_system.get(system, []) if r["dataset"] == dataset]
        if candidates:
            fits = [r for r in candidates if differs(run, r["settings"]) is None]
            if not fits:
                out.lines.append(f"skipped {where}: {system} on {dataset}, settings differ on "
                                 f"{differs(run, candidates[0]['settings'])}")
                continue
            row = max(fits, key=lambda r: len(r["settings"]))
            if row["row"] in out.runs:
                out.lines.append(f"skipped {where}: duplicate of row {row['label']} — newest kept ({out.runs[row['row']].path})")
                continue
            out.runs[row["row"]] = run
            out.lines.append(f"used {where} for row {row['label']} ({system} on {dataset})")
            continue
        common = differs(run, board.get("settings") or {})
        if not add_unmatched:
            out.lines.append(f"skipped {where}: no row for {system} on {dataset} (add_unmatched=true adds one)")
            continue
        if common is not None:
            out.lines.append(f"skipped {where}: {system} on {dataset}, settings differ on {common}")
            continue
        own = system_overrides(run, system)
        key = (system, dataset, tuple(own))
        if key in added:
            out.lines.append(f"skipped {where}: duplicate of row {added[key]['label']} — newest kept "
                             f"({out.runs[added[key]['row']].path})")
            continue
        name = system.partition("=")[2]
        spec = {"row": _row_id(name, own, {r["row"] for r in rows} | {a["row"] for a in added.values()}),
                "label": name + (f" ({', '.join(own)})" if own else ""), "system": system, "dataset": dataset,
                "settings": dict(board.get("settings") or {}), "added": True,
                "paradigm": "compression" if system.startswith("method=") else "memory"}
        added[key] = spec
        out.runs[spec["row"]] = run
        out.lines.append(f"used {where} for row {spec['label']} (added from runs: no row of the board names {system})")
    out.added = sorted(added.values(), key=lambda s: s["label"])
    return out


def _row_id(name: str, own: list[str], taken: set[str]) -> str:
    base = name + ("[" + ",".join(own) + "]" if own else "")
    rid, n = base, 2
    while rid in taken:
        rid, n = f"{base}#{n}", n + 1
    return rid
