"""What every intrinsic task shares: the method it scores, the base-model baselines, resumable
records and the results files (results.json / results.md, with the evaluator's provenance)."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from ctxbench.data.errors import DataError
from ctxbench.core.errors import ConfigError
from ctxbench.metrics.aggregate import bootstrap_stderr
from ctxbench.report.markdown import md_table
from ctxbench.runs.results import JsonlAppender, atomic_write_text, provenance_line, read_jsonl_tolerant, run_metadata, write_json
from ctxbench.core.types import Sample

RECORDS, RESULTS_JSON, RESULTS_MD = "records.jsonl", "results.json", "results.md"
TASK_VERSION = "1"  # bump when a task's definition of its numbers changes (recorded in results.json)


def require(method: Any, task: str, name: str, *attrs: str) -> None:
    """Refuse a method (class or instance) that lacks what ``task`` needs (ctxbench/core/task_protocol.py)."""
    missing = [a for a in attrs if not callable(getattr(method, a, None))]
    if missing:
        able = methods_offering(attrs)
        raise ConfigError(f"task={task}: method={name} does not offer {', '.join(missing)} "
                          f"(ctxbench/core/task_protocol.py); methods that do: {', '.join(able) or 'none'}")


def methods_offering(attrs: Sequence[str]) -> list[str]:
    from ctxbench.core.registry import get, names

    return [n for n in names("method") if all(callable(getattr(get("method", n), a, None)) for a in attrs)]


def tokenizer_of(method: Any) -> Any:
    tok = getattr(method, "tokenizer", None)
    if tok is None:
        raise ConfigError(f"{type(method).__name__} has no tokenizer: the intrinsic tasks need one")
    return tok


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def lm_nll(lm: Any, before: Sequence[int], target: Sequence[int]) -> tuple[float, int]:
    """Summed NLL (nats) of ``target`` read after ``before`` by a causal LM, in one forward."""
    if not before:
        raise ValueError("lm_nll needs at least one token before the target")
    ids = torch.tensor([list(before) + list(target)], device=model_device(lm))
    logits = lm(input_ids=ids).logits[0, len(before) - 1:-1].float()
    tgt = ids[0, len(before):]
    return float(torch.nn.functional.cross_entropy(logits, tgt, reduction="sum")), int(tgt.numel())


def baseline_nll(lm: Any, kind: str, context: Sequence[Sequence[int]], prompt: Sequence[int],
                 target: Sequence[int], start: Sequence[int]) -> tuple[float, int, int]:
    """(nll, tokens, context tokens read) of a base-model baseline: ``full_context`` reads every
    context chunk then the prompt; ``no_context`` reads only the start token and the prompt."""
    if kind == "full_context":
        flat = [t for c in context for t in c]
        before = (flat or list(start)) + list(prompt)
        nll, n = lm_nll(lm, before, target)
        return nll, n, len(flat)
    if kind == "no_context":
        nll, n = lm_nll(lm, list(start) + list(prompt), target)
        return nll, n, 0
    raise ConfigError(f"task.baselines: unknown baseline {kind!r}; baselines are full_context, no_context")


def task_method(cfg: Any, out_dir: Path, task: str, *attrs: str) -> tuple[Any, str]:
    """The trained (or training-free) ``method=`` the task scores, built as ``eval`` builds it, once
    its class is known to offer ``attrs`` (checked before any model loads)."""
    from ctxbench.core.registry import get
    from ctxbench.evaluation.systems import build_system, chosen

    if not chosen(cfg, "method"):
        raise ConfigError(f"task={task} scores a compression method: pass method=NAME (and checkpoint=DIR for a "
                          "trained one); memory systems answer questions, task=qa")

    require(get("method", str(cfg.method.name)), task, str(cfg.method.name), *attrs)
    system, _llm, name = build_system(cfg, out_dir)
    require(system, task, str(cfg.method.name), *attrs)
    return system, name


def texts_of(samples: Iterable[Sample]) -> list[tuple[str, str]]:
    """(history id, text) of every sample: a document's text, or its sessions in the plain style."""
    from ctxbench.core.render import render_history

    out = []
    for s in samples:
        text = s.history.text if not s.history.sessions else render_history(s.history, "plain")
        if text.strip():
            out.append((s.history.id, text))
    return out


def token_windows(samples: list[Sample], tokenizer: Any, size: int, n: int, skip: int) -> list[tuple[str, list[int]]]:
    """Up to ``n`` non-overlapping windows of ``size`` tokens, in text order, each text from token ``skip``."""
    out: list[tuple[str, list[int]]] = []
    for hid, text in texts_of(samples):
        ids = encode(tokenizer, text)[skip:]
        for i in range(0, len(ids) - size + 1, size):
            out.append((f"{hid}@{skip + i}", ids[i:i + size]))
            if len(out) >= n:
                return out
    return out


class Records:
    """Records of one task run, appended as they are made (flushed, fsynced) to records.jsonl, so a
    rerun in the same folder computes only what is missing. Keyed by ``key``."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / RECORDS
        rows, _torn = read_jsonl_tolerant(self.path, required=("key",))
        self.done = {str(r["key"]): r for r in rows}
        self._log = JsonlAppender(self.path)

    def get_or_make(self, key: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key not in self.done:
            t0 = time.perf_counter()
            row = make()
            row = {"key": key, **row, "seconds": round(time.perf_counter() - t0, 4)}
            self._log.append(row)
            self.done[key] = row
        return self.done[key]

    def close(self) -> None:
        self._log.close()


def whole_or_round(x: float, digits: int = 1) -> int | float:
    """A mean that is a whole number prints as one (128, not 128.0); else rounded."""
    return int(x) if float(x).is_integer() else round(x, digits)


def mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and bootstrap standard error (the evaluator's), rounded; (None, None) for no values."""
    if not values:
        return None, None
    se = bootstrap_stderr(np.asarray(values, dtype=np.float64))[0]
    return round(float(np.mean(values)), 4), None if se is None else round(se, 4)


def ppl(nll: float, tokens: int) -> float | None:
    return None if tokens <= 0 else round(math.exp(nll / tokens), 4)


def progress_bar(items: Sequence[Any], desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=not enabled, leave=False)


def write_results(out_dir: Path, cfg: Any, method: Any, task: str, system: str, rows: list[dict[str, Any]],
                  header: list[str], cells: list[list[Any]], extra: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """results.json (task, version, rows, what the method learned, the evaluator's run metadata, where
    the model ran) and results.md (one table)."""
    results = {"task": task, "task_version": TASK_VERSION, "system": system, "rows": rows, **extra}
    summary = getattr(method, "state_summary", None)
    if callable(summary):  # e.g. LoCoCo's learned λ per layer
        results["method_state"] = summary()
    placement = method.placement() if callable(getattr(method, "placement", None)) else None
    results.update(run_metadata(cfg, "eval", {"system": system, "dataset": str(cfg.dataset.name)}, placement=placement))
    write_json(Path(out_dir) / RESULTS_JSON, results)
    lines = [f"# eval task={task}: {system} on {cfg.dataset.name}", "", md_table(header, cells), ""]
    lines += [*notes, "", f"Provenance: {provenance_line(results)}",
              f"git commit: {(results.get('git') or {}).get('commit') or 'none'}; seed: {results.get('seed')}; "
              f"created {results.get('created')}", ""]
    atomic_write_text(Path(out_dir) / RESULTS_MD, "\n".join(lines))
    return results


def no_items(task: str, cfg: Any, what: str) -> DataError:
    return DataError(f"dataset={cfg.dataset.name}", f"gives task={task} nothing to score: {what}")
