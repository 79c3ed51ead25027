"""A board file: a stored board (``report board=locomo_all``) or one a user wrote anywhere (``report
board=~/my_board.yaml``), read and checked before any run is, each mistake one line naming the file,
the row and the field.

The format (docs/paper-tables.md, "Boards")::

    name: my_board                 # optional: the file's stem; names the output (outputs/report/<name>.md)
    kind: board                    # optional in a file given with board=
    title: "..."                   # optional heading; description: a paragraph under it
    dataset: locomo                # the dataset every row is on (a row may name its own)
    settings: {qa_prompt: brief}   # dotted config keys every row's run must have (a row adds its own)
    add_unmatched: false           # runs of a system no row names get a row of their own
    columns: [f1, llm_judge, held, answer_p50_s]   # optional: registered metrics and cost columns
    rows:
      - system: rag                # memory=rag, method=snapkv, or a bare registered name
        label: RAG                 # optional (the row id); row: its id (default: the system name)
        settings: {memory.top_k: 10}
        paradigm: memory           # compression | memory | baseline (default: memory= → memory, method= → compression)
        experiment: locomo_all_rag # optional: what `reproduce` runs for it; never used to find a run
        trained_by: ...            # optional: the train experiment that makes its checkpoint
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctxbench.report.runs import ReportError

PARADIGMS = ("compression", "memory", "baseline")
BOARD_KEYS = ("name", "kind", "title", "description", "dataset", "settings", "add_unmatched", "columns", "rows")
ROW_KEYS = ("row", "system", "label", "dataset", "settings", "paradigm", "experiment", "trained_by")
GROUPS = ("memory", "method")  # the config groups a system is chosen from (eval memory=NAME | method=NAME)


def looks_like_file(spec: str) -> bool:
    """A path separator, a .yaml / .yml suffix, a leading ``~``, or an existing file: not a stored board's name."""
    return os.sep in spec or "/" in spec or spec.startswith("~") or spec.endswith((".yaml", ".yml")) or Path(spec).is_file()


def board_path(spec: str) -> Path:
    """``board=NAME`` → ``ctxbench/report/papers/NAME.yaml``; anything that looks like a file (a separator,
    a .yaml / .yml suffix, ``~``, or an existing path) → that file, ``~`` expanded, relative to the cwd."""
    from ctxbench.report.tables import PAPERS_DIR

    spec = str(spec)
    if looks_like_file(spec):
        path = Path(os.path.expanduser(spec))
        if not path.is_file():
            raise ReportError(f"board={spec}: no such file" + (f" ({path})" if str(path) != spec else ""))
        return path
    path = PAPERS_DIR / f"{spec}.yaml"
    if not path.exists():
        from ctxbench.core.registry import suggest
        from ctxbench.report.tables import table_names

        raise ReportError(f"unknown board {spec!r} (a stored board, or a path to a board file).{suggest(spec, table_names('board'))}")
    return path


def load_board(spec: str) -> dict[str, Any]:
    """The board ``spec`` names, checked (:func:`check_board`), with ``path`` set to its file."""
    path = board_path(spec)
    from omegaconf import OmegaConf

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as e:  # noqa: BLE001 - any parse error is the file's problem
        from ctxbench.data.errors import first_line

        raise ReportError(f"{path}: cannot read YAML ({first_line(e)})") from None
    return check_board(data, path)


def check_board(data: Any, path: Path) -> dict[str, Any]:
    """The board as a dict with every row's ``row``, ``label``, ``system``, ``dataset``, ``settings``
    (the board's merged under the row's) and ``paradigm`` filled in; a mistake is a ReportError naming
    the file, the row and the field."""
    if not isinstance(data, dict):
        raise ReportError(f"{path}: a board file is a mapping with a 'rows' list (got {type(data).__name__})")
    _no_unknown(path, "", data, BOARD_KEYS)
    if data.get("kind", "board") != "board":
        raise ReportError(f"{path}: field 'kind': {data['kind']!r} is not a board (report table={path.stem} reads it)")
    if not isinstance(data.get("rows"), list):
        raise ReportError(f"{path}: field 'rows': a list of rows is required (each: system, dataset, settings, label)")
    board = {**data, "name": str(data.get("name") or path.stem), "path": str(path)}
    if "/" in board["name"] or "\\" in board["name"] or board["name"] in (".", ".."):
        raise ReportError(f"{path}: field 'name': {board['name']!r} names the output file: no folders in it")
    for key in ("dataset", "title", "description"):
        if board.get(key) is not None and not isinstance(board[key], str):
            raise ReportError(f"{path}: field {key!r}: a string, not {board[key]!r}")
    if not isinstance(board.get("add_unmatched", False), bool):
        raise ReportError(f"{path}: field 'add_unmatched': true or false, not {board['add_unmatched']!r}")
    common = _settings(path, "", board.get("settings"))
    from ctxbench.report.board_columns import parse_columns

    board["columns"] = parse_columns(board.get("columns"), path)
    rows, seen = [], {}
    for i, row in enumerate(board["rows"]):
        rows.append(_check_row(path, i, row, board.get("dataset"), common))
        rid = rows[-1]["row"]
        if rid in seen:
            raise ReportError(f"{path}: rows[{i}] ({rid}): field 'row': {rid!r} is also rows[{seen[rid]}]'s id; "
                              "give one of them its own row: key")
        seen[rid] = i
    board["rows"], board["settings"] = rows, common
    return board


def _check_row(path: Path, i: int, row: Any, dataset: str | None, common: dict[str, Any]) -> dict[str, Any]:
    where = f"rows[{i}]"
    if not isinstance(row, dict):
        raise ReportError(f"{path}: {where}: a mapping (system, dataset, settings, label), not {row!r}")
    where += f" ({row.get('row') or row.get('label') or row.get('system') or '?'})"
    _no_unknown(path, where + ": ", row, ROW_KEYS)
    system = row.get("system")
    if not isinstance(system, str) or not system:
        raise ReportError(f"{path}: {where}: field 'system': required, the memory or method the row shows "
                          "(rag, memory=rag, method=snapkv)")
    system = check_system(system, f"{path}: {where}: field 'system'")
    for key in ("row", "label", "dataset", "experiment", "trained_by"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ReportError(f"{path}: {where}: field {key!r}: a string, not {row[key]!r}")
    ds = row.get("dataset") or dataset
    if not ds:
        raise ReportError(f"{path}: {where}: field 'dataset': no dataset (give it here or at the board's top)")
    group = system.partition("=")[0]
    paradigm = row.get("paradigm") or ("compression" if group == "method" else "memory")
    if paradigm not in PARADIGMS:
        raise ReportError(f"{path}: {where}: field 'paradigm': {paradigm!r}; use one of {', '.join(PARADIGMS)}")
    rid = str(row.get("row") or system.partition("=")[2])
    return {**row, "row": rid, "label": str(row.get("label") or rid), "system": system, "dataset": str(ds),
            "paradigm": paradigm, "settings": {**common, **_settings(path, where + ": ", row.get("settings"))}}


def check_system(system: str, where: str) -> str:
    """``rag`` / ``memory=rag`` / ``method=snapkv`` → ``group=name`` of a registered system (a bare name
    is looked up as a memory, then a method); an unknown one is refused with the nearest names."""
    from ctxbench.core.registry import names, suggest

    group, _, name = system.rpartition("=")
    if group and group not in GROUPS:
        raise ReportError(f"{where}: {system!r}: write memory=NAME or method=NAME (or the bare name)")
    for g in ((group,) if group else GROUPS):
        if name in names(g):
            return f"{g}={name}"
    known = sorted(set(names("memory")) | set(names("method"))) if not group else names(group)
    raise ReportError(f"{where}: {system!r} is not a registered {group or 'memory or method'} "
                      f"(a plug-in must be installed or loaded).{suggest(name, known)}")


def _settings(path: Path, where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise ReportError(f"{path}: {where}field 'settings': a mapping of dotted config keys to values "
                          f"({{memory.top_k: 10}}), not {value!r}")
    return dict(value)


def _no_unknown(path: Path, where: str, data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    from ctxbench.core.registry import suggest

    for key in data:
        if key not in allowed:
            raise ReportError(f"{path}: {where}field {key!r}: not a board key.{suggest(str(key), list(allowed), label='Keys')}")


def board_out(board: dict[str, Any], out: str | Path | None) -> Path:
    """Where the board's markdown goes: ``out=`` (``~`` expanded), else ``outputs/report/<name>.md`` —
    never beside the board's YAML. Refused when it, or the .json / .png / .wandb_id written beside it,
    would replace a file of a run folder (results.md, results.json, ...) that no board wrote."""
    path = Path(os.path.expanduser(str(out))) if out else Path("outputs") / "report" / f"{board['name']}.md"
    if path.suffix != ".md":
        path = path.with_suffix(path.suffix + ".md") if path.suffix not in ("", ".json", ".png") else path.with_suffix(".md")
    for target in (path, path.with_suffix(".json"), path.with_suffix(".png"), path.with_suffix(".wandb_id")):
        if target.exists() and _in_run_folder(target) and not _board_wrote(path):
            raise ReportError(f"out={out}: would write over {target}, a file of the run folder {_in_run_folder(target)}; "
                              "choose another out= (a new name there is fine)")
    return path


def _in_run_folder(target: Path) -> Path | None:
    from ctxbench.report.runs import is_run_dir

    for d in [target.parent, *target.parent.parents]:
        if is_run_dir(d) or (d / ".hydra").is_dir():
            return d
    return None


def _board_wrote(md: Path) -> bool:
    """A board's own earlier output: its .json is the list of row records a board writes."""
    import json

    try:
        data = json.loads(md.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, list) and all(isinstance(r, dict) and "row" in r and "system" in r for r in data)
