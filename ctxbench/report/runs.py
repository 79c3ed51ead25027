"""Read finished run folders: which overrides made them and what they scored.

A run folder is what ``python -m ctxbench train|eval|score`` leaves behind::

    <run>/.hydra/config.yaml, .hydra/overrides.yaml   (every run)
    <run>/results.json                                 (eval / score: overall + by_category + cost + metadata)
    <run>/metrics.jsonl, <run>/train_summary.json      (train: one line per logged step, a final line)
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ctxbench.data.errors import DataError
from ctxbench.core.plain import json_kind as _kind

RESULTS_JSON, METRICS_JSONL, TRAIN_SUMMARY = "results.json", "metrics.jsonl", "train_summary.json"
#: Fields of a results.json row that are not metric values (names, ids, counts).
METRIC_FREE = {"id", "name"}


class ReportError(DataError):
    """A problem with the folders or tables given to ``report``; the CLI prints it as one line."""

    def __init__(self, message: str):
        super().__init__("report", message)


@dataclass
class Run:
    """One finished (or partly finished) run folder and what it recorded."""

    path: Path
    kind: str                                   # eval | train | unknown
    overrides: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] | None = None       # results.json
    train: dict[str, Any] = field(default_factory=dict)  # final_loss, eval_loss, step, ppl

    def override_map(self) -> dict[str, str]:
        """``{"method.lambda_ae": "0.2", "model": "tiny"}`` from ``.hydra/overrides.yaml``."""
        out: dict[str, str] = {}
        for o in self.overrides:
            if "=" not in o:
                continue
            key, _, value = o.partition("=")
            out[key.lstrip("+~")] = value
        return out

    def scalar_metrics(self) -> dict[str, Any]:
        """The run's headline numbers: results.json ``overall`` for eval, losses for train.

        ``<metric>_n`` (a count) and ``<metric>_stderr`` (an uncertainty) are not metrics and are left out.
        """
        if self.results is not None:
            return {k: v for k, v in (self.results.get("overall") or {}).items()
                    if isinstance(v, (int, float)) and not k.endswith(("_n", "_stderr"))}
        return dict(self.train)

    def experiment(self) -> dict[str, Any]:
        exp = self.config.get("experiment")
        return exp if isinstance(exp, dict) else {}


def _load_yaml(path: Path) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # noqa: BLE001 - any parse error is the file's problem
        raise ReportError(f"{path}: cannot read YAML ({e})") from None



def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding one object; anything else (bytes that are not UTF-8 JSON, a list, a
    string, too deep) is a one-line :class:`ReportError` naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: malformed JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not UTF-8 text (a damaged file?)") from None
    except RecursionError:
        raise ReportError(f"{path}: malformed JSON (nested too deeply)") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: a JSON {_kind(data)}, expected an object")
    return data


def check_results(path: Path, results: dict[str, Any]) -> dict[str, Any]:
    """results.json as the evaluator writes it: ``overall`` an object of numbers (or null) by metric
    (``<metric>_stderr``, ``n`` too), ``by_category`` an object of such objects (plus their ``id``);
    a wrong type is a ReportError naming the field."""
    def row(where: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise ReportError(f"{path}: field {where} is a JSON {_kind(value)}, expected an object")
        for k, v in value.items():
            if k in METRIC_FREE or v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ReportError(f"{path}: field {where}.{k} is {json.dumps(v)[:40]}, expected a number or null")

    if results.get("overall") is not None:
        row("overall", results["overall"])
    cats = results.get("by_category")
    if cats is not None:
        if not isinstance(cats, dict):
            raise ReportError(f"{path}: field by_category is a JSON {_kind(cats)}, expected an object")
        for name, value in cats.items():
            row(f"by_category.{name}", value)
    return results


def _train_numbers(run_dir: Path) -> dict[str, Any]:
    """Final loss / eval loss (and perplexity) of a train run from train_summary.json or metrics.jsonl."""
    out: dict[str, Any] = {}
    summary = run_dir / TRAIN_SUMMARY
    if summary.exists():
        s = read_json_object(summary)
        for k in ("step", "loss", "eval_loss"):
            if isinstance(s.get(k), (int, float)):
                out["final_loss" if k == "loss" else k] = s[k]
    metrics = run_dir / METRICS_JSONL
    if metrics.exists():
        last_loss, last_step, final_eval = None, None, None
        parts: dict[str, float] = {}
        for line in metrics.read_bytes().splitlines():
            try:
                row = json.loads(line.decode("utf-8"))
            except (ValueError, RecursionError):
                continue  # a torn last line of a killed run (or a damaged one: the others still count)
            if not isinstance(row, dict):
                continue
            if row.get("final"):
                final_eval = row.get("eval_loss", final_eval)
                continue
            if isinstance(row.get("loss"), (int, float)):
                last_loss, last_step = row["loss"], row.get("step", last_step)
                # a method's own loss parts (ICAE ae_loss / lm_loss ...), last logged value
                parts = {k: v for k, v in row.items() if k.endswith("_loss") and k != "eval_loss"
                         and isinstance(v, (int, float))}
            if isinstance(row.get("eval_loss"), (int, float)):
                final_eval = row["eval_loss"]
        out.setdefault("final_loss", last_loss)
        for k, v in parts.items():
            out.setdefault(k, v)
        out.setdefault("step", last_step)
        if final_eval is not None:
            out.setdefault("eval_loss", final_eval)
    if isinstance(out.get("eval_loss"), (int, float)) and out["eval_loss"] < 50:
        out["eval_ppl"] = round(math.exp(out["eval_loss"]), 4)
    return {k: v for k, v in out.items() if v is not None}


def load_run(run_dir: str | Path) -> Run:
    """Read one run folder (raises ReportError when it has neither results nor training logs)."""
    d = Path(run_dir)
    hydra = d / ".hydra"
    overrides = _load_yaml(hydra / "overrides.yaml") if (hydra / "overrides.yaml").exists() else []
    config = _load_yaml(hydra / "config.yaml") if (hydra / "config.yaml").exists() else {}
    if not isinstance(overrides, (list, type(None))):
        raise ReportError(f"{hydra / 'overrides.yaml'}: a YAML {_kind(overrides)}, expected a list of overrides")
    if not isinstance(config, (dict, type(None))):
        raise ReportError(f"{hydra / 'config.yaml'}: a YAML {_kind(config)}, expected a mapping")
    results = None
    if (d / RESULTS_JSON).exists():
        results = check_results(d / RESULTS_JSON, read_json_object(d / RESULTS_JSON))
        if isinstance(results.get("config"), dict):
            config = results["config"]  # the resolved config the evaluator recorded
    train = _train_numbers(d)
    kind = "eval" if results is not None else ("train" if train else "unknown")
    return Run(path=d, kind=kind, overrides=[str(o) for o in (overrides or [])], config=config or {},
               results=results, train=train)


def is_run_dir(d: Path) -> bool:
    return (d / RESULTS_JSON).exists() or (d / METRICS_JSONL).exists() or (d / TRAIN_SUMMARY).exists()


def find_runs(roots: Iterable[str | Path], skipped: list[str] | None = None, quiet: bool = False) -> list[Run]:
    """Every run folder at or below ``roots`` (checkpoint folders are not descended into).

    A broken run folder is skipped with a line on stderr (unless ``quiet``: the caller prints
    ``skipped``) and its reason appended to ``skipped``.
    """
    found: list[Run] = []
    seen: set[Path] = set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise ReportError(f"{root}: no such folder")
        stack = [root]
        while stack:
            d = stack.pop()
            if d.resolve() in seen:
                continue
            seen.add(d.resolve())
            if is_run_dir(d):
                try:
                    found.append(load_run(d))
                except ReportError as e:  # one broken run folder does not hide the others
                    if not quiet:
                        print(f"report: skipped {e}", file=sys.stderr)
                    if skipped is not None:
                        skipped.append(str(e))
                continue
            stack.extend(sorted((p for p in d.iterdir() if p.is_dir() and p.name not in (".hydra", "checkpoints")),
                                reverse=True))
    return found


def created(run: Run) -> str:
    """When the run was made, sortable: results.json ``created``, else the folder's modification time."""
    stamp = (run.results or {}).get("created")
    if stamp:
        return str(stamp)
    try:
        return f"{run.path.stat().st_mtime:020.3f}"
    except OSError:
        return ""


def config_value(config: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``task.name``) in a run's recorded config; None where any part is missing."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
