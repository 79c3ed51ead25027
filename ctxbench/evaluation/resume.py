"""What a rerun in the same run folder resumes from: the answers already in predictions.jsonl.

A rerun (``hydra.run.dir=DIR``) skips every question already answered there, so a killed run never
answers anything twice. A failed answer (``failed: true``) is answered again; a torn last line (an
interrupted write) is dropped and re-answered. Under ``accelerate launch`` each rank appends to its
own ``predictions.rank<k>.jsonl`` (:mod:`ctxbench.evaluation.shard`); a rerun at any process count
reads them all.

``limit`` is not part of a run's config (:data:`ctxbench.runs.guard.EXCLUDED_KEYS`): a rerun with a
lower limit keeps every answer already paid for (:func:`beyond_plan`) in predictions.jsonl, unscored,
and a later rerun with a higher limit takes them up again without asking the system twice.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm import tqdm

from ctxbench.data.errors import DataError
from ctxbench.runs.results import read_jsonl_tolerant, write_jsonl

PREDICTIONS = "predictions.jsonl"
SHARD_GLOB = "predictions.rank*.jsonl"


def predictions_path(out_dir: Path, shard: int | None) -> Path:
    """Where this process appends its answers: predictions.jsonl, or its rank's shard file."""
    return out_dir / (PREDICTIONS if shard is None else f"predictions.rank{shard}.jsonl")


def read_predictions(pred_path: Path) -> dict[str, dict[str, Any]]:
    """The answers an earlier run wrote (a torn last line dropped and re-answered); a line whose
    id, prediction or failed flag has the wrong type is a DataError naming the file and line."""
    existing, dropped = read_jsonl_tolerant(pred_path, required=("id",))
    for i, r in enumerate(existing, 1):
        for key, ok, want in (("id", isinstance(r["id"], (str, int)) and not isinstance(r["id"], bool),
                               "a string or an integer"),
                              ("prediction", isinstance(r.get("prediction", ""), str), "a string"),
                              ("failed", isinstance(r.get("failed", False), bool), "true or false")):
            if not ok:
                raise DataError(pred_path, f"{r.get(key)!r:.40} is not {want}; fix or delete the line "
                                           "to resume", record=i, field=key)
    if dropped:
        tqdm.write(f"eval: dropped a torn last line of {pred_path} (interrupted write); it will be re-answered")
        write_jsonl(pred_path, existing)
    return {str(r["id"]): r for r in existing}


def answered(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every answer already written: the merged file and any per-rank shard files."""
    done: dict[str, dict[str, Any]] = {}
    for path in [out_dir / PREDICTIONS, *sorted(out_dir.glob(SHARD_GLOB))]:
        done.update(read_predictions(path))
    return done


def needs_answer(done: dict[str, dict[str, Any]], qid: str) -> bool:
    """Not answered yet, or answered with a failure (re-answered, never counted)."""
    rec = done.get(qid)
    return rec is None or bool(rec.get("failed"))


def beyond_plan(out_dir: Path, order: list[str]) -> list[dict[str, Any]]:
    """The records in the run folder outside this run's plan (``order``: the ids it answers), in file
    order: answered by an earlier run with a higher ``limit``, kept in predictions.jsonl, not scored."""
    planned = set(order)
    return [r for qid, r in answered(out_dir).items() if qid not in planned]
