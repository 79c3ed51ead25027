"""``python -m ctxbench report``: sweep tables and plots, and paper tables side by side with ours.

    python -m ctxbench report sweep=multirun/train/<time>            # sweep.md + sweep.png in that folder
    python -m ctxbench report table=amem_locomo_table1 [runs=DIR]   # ours vs the paper, with differences
    python -m ctxbench report board=locomo_all|FILE runs=DIR[,DIR]  # systems side by side (board.py; a board file anywhere)
    python -m ctxbench report compare=RUN_A,RUN_B                    # B - A per metric: paired bootstrap CI, p
    python -m ctxbench report reruns=RUN1,RUN2,...                   # the variance of the system vs the judge
    python -m ctxbench report decay=RUN1,RUN2,...                    # accuracy by evidence age, runs side by side
    python -m ctxbench report table=ruler runs=DIR                   # RULER: accuracy per task x ratio x method (+ PNG, CSV)
    python -m ctxbench report table=longmemeval [runs=DIR,DIR]       # LongMemEval per type: published rows beside ours
    python -m ctxbench report judges [judge.panel=[...]] dataset=locomo  # each judge's leniency (judges.json)
    python -m ctxbench report                                        # list the paper tables
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.report.runs import ReportError

DEFAULT_ROOTS = ("outputs", "multirun")

#: reports over a list of run folders, each ``report/<key>.py`` with ``<key>_report(runs, out)``
RUN_LIST_REPORTS = ("compare", "reruns", "decay")


def _paths(value: Any) -> list[Path]:
    """``runs=DIR``, ``runs=[A,B]`` or ``runs="A,B"`` → paths."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Path(p.strip()) for p in value.split(",") if p.strip()]
    return [Path(str(p)) for p in value]


def main(cfg: Any) -> dict[str, Any] | None:
    from ctxbench.runs.wandb_log import check_logger

    check_logger(cfg)  # logger=wandb: a board's and a sweep's rows and plot (log_to_wandb)
    if cfg.judges:
        from ctxbench.report.judges import judges_report

        return judges_report(cfg)
    if cfg.sweep_dir:
        from ctxbench.report.sweep import print_summary, sweep_report

        result = sweep_report(cfg.sweep_dir, metric=cfg.metric, plot=cfg.plot)
        print_summary(result)
        log_to_wandb(cfg, "sweep", result)
        return result
    if cfg.board or (cfg.table and _is_board(str(cfg.table))):
        return board_command(cfg, str(cfg.board or cfg.table))
    if cfg.table:
        from ctxbench.report.tables import table_report

        roots = _roots(cfg)
        out = Path(cfg.out) if cfg.out else None
        result = table_report(str(cfg.table), roots, out)
        print(result["markdown"])
        png = "".join(f" and {result[k]}" for k in ("png", "csv") if result.get(k))
        print(f"report: wrote {result['path']}{png} (runs searched: {', '.join(map(str, roots))}; "
              f"{result.get('found_label', 'experiments found')}: {', '.join(result['found']) or 'none'})")
        return result
    for key in RUN_LIST_REPORTS:  # compare=A,B | reruns=... | decay=...: report/<key>.py's <key>_report
        if cfg[key]:
            import importlib

            build = getattr(importlib.import_module(f"ctxbench.report.{key}"), f"{key}_report")
            extra = {"judge_mismatch": str(cfg.judge_mismatch)} if key == "compare" else {}
            result = build(cfg[key], cfg.out, **extra)
            print(result["markdown"])
            print(f"report: wrote {result['path']} and {Path(result['path']).with_suffix('.json')}")
            return result
    from ctxbench.report.tables import table_names

    print("usage: python -m ctxbench report sweep=DIR | table=NAME [runs=DIR] | board=NAME|FILE [runs=DIR,...] | "
          "compare=RUN_A,RUN_B | "
          "reruns=RUN1,RUN2,... | decay=RUN1,RUN2,... | judges [judge.panel=[...]]\npaper tables: "
          + ", ".join(table_names()) + "\nboards (systems side by side): " + ", ".join(table_names("board"))
          + "\nmethods x compression ratios: " + ", ".join(table_names("ruler"))
          + "\nLongMemEval, published beside ours: " + ", ".join(table_names("longmemeval")))
    return None


def _roots(cfg: Any) -> list[Path]:
    """``runs=`` (``~`` expanded; each must exist), else outputs/ and multirun/."""
    import os

    given = [Path(os.path.expanduser(str(p))) for p in _paths(cfg.runs)]
    missing = [str(r) for r in given if not r.exists()]
    if missing:
        raise ReportError(f"runs: no such folder: {', '.join(missing)}")
    return given or [Path(r) for r in DEFAULT_ROOTS]


def _is_board(table: str) -> bool:
    """``table=`` naming a board: a stored one (kind: board) or a file (a path or a .yaml name)."""
    from ctxbench.report.board_file import looks_like_file
    from ctxbench.report.tables import PAPERS_DIR, table_kind

    if looks_like_file(table):
        return True
    return (PAPERS_DIR / f"{table}.yaml").exists() and table_kind(table) == "board"


def board_command(cfg: Any, spec: str) -> dict[str, Any]:
    """``report board=NAME|FILE runs=DIR,...``: the board, then one line per run found (which row it
    filled, or why it was skipped), then where it was written."""
    from ctxbench.report.board import run_board

    roots = _roots(cfg)
    result = run_board(spec, roots, cfg.out, cfg.add_unmatched)
    log_to_wandb(cfg, "board", result, result["board"]["name"])
    print(result["markdown"])
    for line in result["lines"]:
        print(f"report: {line}")
    png = f" and {result['png']}" if result.get("png") else ""
    print(f"report: wrote {result['path']}{png} (runs searched: {', '.join(map(str, roots))}; "
          f"rows filled: {', '.join(result['found']) or 'none'})")
    return result


def log_to_wandb(cfg: Any, kind: str, result: dict[str, Any], table: str = "") -> None:
    """``logger=wandb``: a sweep's rows and plot (in the sweep's wandb group), a board's rows and Pareto
    plot (:mod:`ctxbench.runs.wandb_log`); other tables are not logged."""
    from ctxbench.runs.wandb_log import log_report, sweep_group, wanted

    if not wanted(cfg):
        return
    if kind == "sweep":
        root = Path(str(cfg.sweep_dir))
        log_report(cfg, "sweep", root.name, root / "sweep.wandb_id", result["rows"], result.get("png_path"),
                   group=sweep_group(root))
    elif kind == "board" and result.get("path"):  # a board (report/board.py)
        out = Path(result["path"])
        log_report(cfg, "board", table, out.with_suffix(".wandb_id"), result["records"], result.get("png"))
