"""``logger=wandb`` for ``eval``, ``score`` and ``report``: a finished run's results mirrored to a wandb run.

``eval`` / ``score`` (:func:`log_results`), once results.json is written, read it and predictions.jsonl back:

- config: the run's config, redacted as for ``train`` (:func:`ctxbench.core.secrets.redact`);
- summary: ``plugins/<kind>/<name>`` (a plug-in's distribution and version, or file and sha256),
  ``overall/<key>`` and ``by_category/<category>/<key>`` (every metric with its ``_stderr``, ``n``,
  ``failed_n``), ``cost/...`` and ``health/...`` (results.json's numbers and strings, flattened with ``/``;
  ``health/warnings`` is their count), ``system``, ``dataset``, ``command``;
- table ``by_category``: one row per category (and one ``overall``), each metric beside its stderr;
- table ``samples`` (``log_samples=true``): one row per question — id, category, question, gold (and the
  adversarial answer where one is given), prediction, every per-question metric, each judge's label
  (``<judge metric>_label``: CORRECT / WRONG, ``mixed`` for a mean over judge runs, null when unjudged), the
  context tokens the answering model held (``Usage.held``: text + KV slots + soft slots), failed.

``report`` of a board or sweep (:func:`log_report`): the report's rows as a table and its plot (the board's
Pareto plot, the sweep's plot) as an image.

One wandb run per run folder: its id is kept in ``<run>/wandb_id`` (as ``train`` keeps it), so a rerun of the
same folder resumes the same wandb run; a report keeps its id beside its output (``<table>.wandb_id``,
``DIR/sweep.wandb_id``). Jobs of one sweep
(``-m``) share a wandb group, the sweep folder (``<parent>/<name>``; ``report sweep=DIR`` logs into the same
group); ``logger.group`` overrides it. Files go under the run folder (``<run>/wandb/``) unless ``WANDB_DIR``
is set; ``WANDB_MODE`` wins over ``logger.mode``, and ``disabled`` logs nothing. wandb is imported only
when it logs; without the package, ``logger=wandb`` fails at the start of the command, in one line.
A wandb failure while logging (the results are already written) is one warning line, not a failed run.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from ctxbench.core.errors import ConfigError, MissingDependency

WANDB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
ID_FILE = "wandb_id"
MISSING_WANDB = "logger=wandb needs the wandb package: pip install wandb (or use logger=none)"
JUDGE_PREFIX = "llm_judge"


def wandb_run_id(run_dir: Path, name: str = ID_FILE) -> str:
    """The run's wandb id, kept in ``<run_dir>/<name>`` (made on the first run, reused on resume)."""
    id_file = Path(run_dir) / name
    if not id_file.exists():
        run_id = uuid.uuid4().hex[:12]
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
        return run_id
    try:
        run_id = id_file.read_bytes()[:200].decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        run_id = ""
    if not WANDB_ID.fullmatch(run_id):
        raise ConfigError(f"{id_file} is damaged (a wandb run id is 1-64 letters, digits, '-' or '_'); delete it "
                          "to log the resumed run as a new wandb run")
    return run_id


# ---- when to log -----------------------------------------------------------------------------------

def _logger(cfg: Any) -> Any:
    return _get(cfg, "logger")


def wanted(cfg: Any) -> bool:
    """``logger=wandb`` and a mode other than ``disabled`` (``WANDB_MODE`` wins over ``logger.mode``)."""
    logger = _logger(cfg)
    if logger is None or logger.get("name") != "wandb":
        return False
    return mode_of(cfg) != "disabled"


def mode_of(cfg: Any) -> str:
    return str(os.environ.get("WANDB_MODE") or _logger(cfg).get("mode") or "offline")


def check_logger(cfg: Any) -> None:
    """At the start of a command: ``logger=wandb`` without the wandb package is one line, before any work."""
    if wanted(cfg):
        _wandb()


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise MissingDependency(MISSING_WANDB) from None
    return wandb


# ---- eval / score ----------------------------------------------------------------------------------

def log_results(cfg: Any, out: Path, command: str) -> None:
    """Mirror ``out``'s results.json (and, with ``log_samples``, predictions.jsonl) to a wandb run."""
    if not wanted(cfg):
        return
    out = Path(out)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    tables = {"by_category": category_rows(results)} if results.get("overall") else {}
    if results.get("rows"):  # task=perplexity|reconstruction|choice: the task's own rows
        tables["rows"] = list(results["rows"])
    if _get(cfg, "log_samples") and (out / "predictions.jsonl").is_file():
        tables["samples"] = sample_rows(_read_jsonl(out / "predictions.jsonl"), results)
    summary = summary_values(results)
    _log(cfg, job_type=command, id_dir=out, id_name=ID_FILE, files_dir=out, name=run_name(out),
         group=group_of(cfg), summary=summary, tables=tables, images={})


def summary_values(results: dict[str, Any]) -> dict[str, Any]:
    """results.json's headline numbers as flat wandb summary keys (see the module docstring)."""
    summary: dict[str, Any] = {k: results[k] for k in ("command", "system", "dataset")
                               if isinstance(results.get(k), str)}
    _flatten(results.get("overall") or {}, "overall", summary)
    for cat, row in (results.get("by_category") or {}).items():
        _flatten(row, f"by_category/{cat}", summary)
    _flatten(results.get("cost") or {}, "cost", summary)
    health = dict(results.get("health") or {})
    if isinstance(health.get("warnings"), list):
        health["warnings"] = len(health["warnings"])
    _flatten(health, "health", summary)
    for p in (results.get("provenance") or {}).get("plugins") or []:  # a plug-in's source beside ctxbench's own
        summary[f"plugins/{p.get('kind')}/{p.get('name')}"] = (
            f"{p['distribution']} {p.get('version')}" if p.get("distribution") else f"{p.get('file')} sha256:{p.get('sha256')}")
    return summary


def _flatten(node: Any, prefix: str, into: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _flatten(v, f"{prefix}/{k}", into)
    elif isinstance(node, bool) or isinstance(node, str) or node is None:
        into[prefix] = node
    elif isinstance(node, (int, float)):
        into[prefix] = None if isinstance(node, float) and not math.isfinite(node) else node
    # lists (seeds, warnings already counted) are left to results.json


def metric_names(results: dict[str, Any]) -> list[str]:
    """The run's per-question metrics, in results.json order."""
    return [str(m) for m in (results.get("metrics") or {})]


def category_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per category, then ``overall``: n, failed_n, each metric and its stderr."""
    names = metric_names(results)
    rows = []
    cats = list((results.get("by_category") or {}).items()) + [("overall", results.get("overall") or {})]
    for cat, block in cats:
        row: dict[str, Any] = {"category": cat, "category_id": block.get("id"), "n": block.get("n"),
                               "failed_n": block.get("failed_n", 0)}
        for m in names:
            row[m], row[f"{m}_stderr"] = block.get(m), block.get(f"{m}_stderr")
        rows.append(row)
    return rows


def judge_label(value: Any) -> str | None:
    """A judge metric's per-question value as a label: 1 CORRECT, 0 WRONG, a mean over runs ``mixed``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return "CORRECT" if value == 1 else "WRONG" if value == 0 else "mixed"


def held_tokens(usage: Any) -> int | None:
    """What the answering model held (:attr:`ctxbench.core.types.Usage.held`); None for a record without usage."""
    if not isinstance(usage, dict):
        return None
    from ctxbench.core.types import HELD_FIELDS, Usage

    if not any(k in usage for k in HELD_FIELDS):
        return None
    return int(Usage.from_dict({k: int(usage.get(k) or 0) for k in HELD_FIELDS}).held)


def sample_rows(records: list[dict[str, Any]], results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per question of predictions.jsonl (see the module docstring)."""
    names = metric_names(results)
    judges = [m for m in names if m.startswith(JUDGE_PREFIX) and not m.endswith("_std")]
    adversarial = any(r.get("adversarial_answer") is not None for r in records)
    rows = []
    for r in records:
        row: dict[str, Any] = {"id": str(r.get("id")), "category": _category(r), "question": r.get("question"),
                               "gold": _text(r.get("answer"))}
        if adversarial:
            row["adversarial_answer"] = _text(r.get("adversarial_answer"))
        row["prediction"] = _text(r.get("prediction"))
        for m in names:
            row[m] = r.get(m) if isinstance(r.get(m), (int, float)) and not isinstance(r.get(m), bool) else None
        for m in judges:
            row[f"{m}_label"] = judge_label(r.get(m))
        row["context_tokens"] = held_tokens(r.get("usage"))
        row["failed"] = bool(r.get("failed"))
        rows.append(row)
    return rows


def _category(r: dict[str, Any]) -> str | None:
    name = r.get("category_name")
    if name is not None:
        return str(name)
    return None if r.get("category") is None else str(r.get("category"))


def _text(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    from ctxbench.runs.results import read_jsonl_tolerant

    rows, _ = read_jsonl_tolerant(path)
    return rows


# ---- report -----------------------------------------------------------------------------------------

def log_report(cfg: Any, kind: str, title: str, id_file: Path, rows: list[dict[str, Any]],
               image: Any = None, group: str | None = None) -> None:
    """``report`` of a board (``kind="board"``: its rows, the Pareto plot as ``pareto``) or a sweep
    (``kind="sweep"``: its rows, its plot as ``plot``); the wandb id is kept in ``id_file`` beside the report."""
    if not wanted(cfg):
        return
    id_file = Path(id_file)
    images = {"pareto" if kind == "board" else "plot": Path(image)} if image and Path(image).is_file() else {}
    _log(cfg, job_type=f"report-{kind}", id_dir=id_file.parent, id_name=id_file.name, files_dir=id_file.parent,
         name=f"{kind} {title}", group=_get(_logger(cfg), "group") or group,
         summary={"report": kind, "rows": len(rows)}, tables={kind: rows}, images=images)


# ---- names ------------------------------------------------------------------------------------------

def sweep_group(sweep_dir: str | Path) -> str:
    """The wandb group of a sweep folder: ``<parent>/<name>`` (``multirun/eval/2026-01-01_10-00-00`` →
    ``eval/2026-01-01_10-00-00``), the same for its jobs and for ``report sweep=DIR``."""
    p = Path(os.path.abspath(sweep_dir))
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def group_of(cfg: Any) -> str | None:
    """``logger.group``, else the sweep folder of a ``-m`` job, else none."""
    given = _get(_logger(cfg), "group")
    if given:
        return str(given)
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return sweep_group(hc.sweep.dir)
    except Exception:  # no Hydra app (evaluate_samples, tests calling main directly)
        return None
    return None


def run_name(out: Path) -> str:
    """The run's display name: the run folder's name; a sweep job's number and swept overrides."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            swept = swept_overrides(list(hc.overrides.task), sys.argv[1:])
            return f"{hc.job.num}: {' '.join(swept)}" if swept else str(hc.job.num)
    except Exception:
        pass
    return Path(os.path.abspath(out)).name


def swept_overrides(job: list[str], argv: list[str]) -> list[str]:
    """A sweep job's overrides of the keys swept on the command line (``memory.k=10`` of ``memory.k=10,20``)
    or added by the sweep (a ``sweep=`` group's values), secret values hidden."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ctxbench.core.secrets import redact_override

    typed = [a for a in argv if "=" in a and not a.startswith("-")]
    parser = OverridesParser.create()
    given = {o.get_key_element(): o.is_sweep_override() for o in parser.parse_overrides(typed)}
    swept = []
    for text, o in zip(job, parser.parse_overrides(job)):
        if given.get(o.get_key_element(), True):
            swept.append(redact_override(text))
    return swept


def _get(node: Any, key: str) -> Any:
    try:
        return node.get(key) if node is not None else None
    except AttributeError:
        return None


# ---- the one writer ----------------------------------------------------------------------------------

def _config(cfg: Any) -> dict[str, Any]:
    from ctxbench.core.plain import plain_config
    from ctxbench.core.secrets import redact

    plain = plain_config(cfg)
    return redact(plain) if isinstance(plain, dict) else {}


def _table(wandb: Any, rows: list[dict[str, Any]]) -> Any:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    data = [[_cell(r.get(c)) for c in columns] for r in rows]
    return wandb.Table(columns=columns, data=data, allow_mixed_types=True)


def _cell(v: Any) -> Any:
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v, default=str)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def _log(cfg: Any, *, job_type: str, id_dir: Path, id_name: str, files_dir: Path, name: str, group: str | None,
         summary: dict[str, Any], tables: dict[str, list[dict[str, Any]]], images: dict[str, Path]) -> None:
    from ctxbench.core.secrets import redact

    wandb = _wandb()
    logger = _logger(cfg)
    summary, tables = redact(summary), {k: redact(v) for k, v in tables.items()}  # a secret echoed in a reply
    init = {"project": str(logger.get("project") or "ctxbench"), "entity": logger.get("entity"),
            "id": wandb_run_id(id_dir, id_name), "resume": "allow", "mode": mode_of(cfg),
            "dir": os.environ.get("WANDB_DIR") or str(files_dir), "tags": [str(t) for t in (logger.get("tags") or [])],
            "job_type": job_type, "group": group, "name": name, "config": _config(cfg),
            # no console capture (the run's own log has it), no git remote (a URL may carry a token), no links
            # inside the run folder (ctxbench/runs/guard.py refuses a folder holding one)
            "settings": wandb.Settings(console="off", disable_git=True, save_code=False, symlink=False)}
    try:
        run = wandb.init(**init)
        try:
            payload: dict[str, Any] = {key: _table(wandb, rows) for key, rows in tables.items()}
            payload.update({key: wandb.Image(str(path)) for key, path in images.items()})
            if payload:
                run.log(payload)
            run.summary.update(summary)
        finally:
            run.finish()
    except MissingDependency:
        raise
    except Exception as e:  # the results are written; a wandb failure is not the run's
        from ctxbench.core.secrets import scrub_text

        why = scrub_text(str(e)).splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"warning: logger=wandb: nothing logged to wandb ({why}); the results files are written", file=sys.stderr)
