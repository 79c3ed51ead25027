"""Histories split across processes under ``accelerate launch`` (or torchrun).

Each rank answers a contiguous part of the histories (accelerate's ``split_between_processes``, in
dataset order) into its own ``predictions.rank<k>.jsonl`` (a killed run resumes from them, at any
process count); rank 0 gathers every record (``gather_object``) into one predictions.jsonl in
dataset order.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxbench.core.errors import CtxbenchError
from ctxbench.core.types import Sample
from ctxbench.evaluation.resume import PREDICTIONS, SHARD_GLOB, beyond_plan
from ctxbench.evaluation.run import plan, run_system
from ctxbench.runs.results import write_jsonl


def process_state() -> Any:
    """accelerate's ``PartialState`` under a multi-process launch (``accelerate launch``, torchrun), else None.

    A single process never imports torch for it (an API-model eval stays torch-free).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    from ctxbench.models.loading import process_state as state

    st = state()
    if st.num_processes != world:  # every process would answer everything into the same file
        raise CtxbenchError(f"WORLD_SIZE={world} but accelerate sees {st.num_processes} process(es) (LOCAL_RANK "
                            f"{os.environ.get('LOCAL_RANK', 'unset')}): launch with `accelerate launch -m ctxbench "
                            "eval ...` or torchrun")
    return st


def merge_records(out_dir: Path, records: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Rank 0, with every rank's records gathered: one predictions.jsonl in dataset order, shard files removed;
    returns the planned rows.

    Records answered earlier outside the plan (a higher ``limit``: :func:`~ctxbench.evaluation.resume.beyond_plan`)
    follow the planned ones. The merged file is written (atomically) before any shard file goes, so a
    crash in between loses nothing.
    """
    done = {str(r["id"]): r for r in records}
    missing = [q for q in order if q not in done]
    if missing:
        raise RuntimeError(f"{len(missing)} questions have no prediction after gathering the ranks' answers "
                           f"(first: {missing[0]})")
    rows = [done[q] for q in order]
    write_jsonl(out_dir / PREDICTIONS, rows + beyond_plan(out_dir, order))
    for f in out_dir.glob(SHARD_GLOB):
        f.unlink()
    return rows


def run_sharded(system: Any, samples: list[Sample], out_dir: Path, state: Any, *, llm: Any = None,
                limit: int | None = None, progress: bool = True, concurrency: int = 1,
                log_samples: bool = False, protocol_pure: bool = False) -> list[dict[str, Any]] | None:
    """The histories split across the processes (``split_between_processes``: contiguous parts in
    dataset order), each rank answering its part into its shard file; every rank's records are
    gathered (``gather_object``) and rank 0 returns them all, merged into predictions.jsonl in
    dataset order. The other ranks return None."""
    from accelerate.utils import gather_object

    work = plan(samples, limit)  # the limit is applied to the whole dataset once, before splitting
    order = [q.id for _, qs in work for q in qs]
    parts = [replace(s, questions=list(qs)) for s, qs in work]
    with state.split_between_processes(parts) as mine:
        records = run_system(system, list(mine), out_dir, llm=llm, progress=progress and state.is_main_process,
                             shard=state.process_index, concurrency=concurrency, log_samples=log_samples,
                             protocol_pure=protocol_pure)
    gathered = gather_object(records)
    if not state.is_main_process:
        return None
    return merge_records(out_dir, gathered, order)
