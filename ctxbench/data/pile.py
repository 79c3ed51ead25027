"""The Pile: JSONL shards {text, meta: {pile_set_name}} (``.jsonl`` or ``.jsonl.zst``), or the hub.

``dataset.path`` is a file, a folder of shards, or a hub id (``monology/pile-uncopyrighted``,
streamed when online). ``dataset.subsets=[Pile-CC, ArXiv]`` keeps documents whose
``meta.pile_set_name`` is listed; ``dataset.limit`` caps documents; ``dataset.min_chars`` skips
very short ones (counted). Samples are documents with no questions (pretraining text).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from ctxbench.core.registry import register
from ctxbench.core.types import History, Sample
from ctxbench.data.errors import DataError
from ctxbench.data.hub import iter_hub_rows
from ctxbench.data.records import field, iter_jsonl
from ctxbench.data.samples import Samples
from ctxbench.data.sources import locate, looks_like_hub_id

SHARD_SUFFIXES = (".jsonl", ".jsonl.zst", ".json")


def shard_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SHARD_SUFFIXES))
    if not files:
        raise DataError(path, f"folder holds no Pile shards ({', '.join(SHARD_SUFFIXES)})")
    return files


def _local_rows(path: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for f in shard_files(path):
        for n, rec in iter_jsonl(f):
            yield str(f), f"line {n}", rec


def _hub_rows(hub_id: str, split: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for i, rec in enumerate(iter_hub_rows(hub_id, split, "pile")):
        yield f"{hub_id}:{split}", f"row {i}", rec


def pile_set_name(rec: dict[str, Any], source: str, record: str) -> str | None:
    meta = rec.get("meta")
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise DataError(source, f"expected an object, got {type(meta).__name__}", record=record, field="meta")
    return field(meta, "pile_set_name", str, source, record, default=None, prefix="meta.")


def load_pile_docs(cfg: Any) -> Samples:
    raw = cfg.path
    if raw and looks_like_hub_id(str(raw)):
        source, rows = f"{raw}:{cfg.split}", _hub_rows(str(raw), cfg.split)
    else:
        path = locate(raw, "pile")
        source, rows = str(path), _local_rows(path)
    subsets = set(cfg.subsets or [])
    limit, min_chars = cfg.limit, cfg.min_chars
    max_chars = cfg.max_chars
    quirks: Counter = Counter(missing_meta=0, too_short=0, other_subsets=0)
    out: list[Sample] = []
    for src, record, rec in rows:
        if limit and len(out) >= int(limit):
            break
        text = field(rec, "text", str, src, record)
        set_name = pile_set_name(rec, src, record)
        if set_name is None:
            quirks["missing_meta"] += 1
        if subsets and set_name not in subsets:
            quirks["other_subsets"] += 1
            continue
        if len(text) < min_chars:
            quirks["too_short"] += 1
            continue
        doc_id = f"pile-{len(out)}" + (f"-{set_name}" if set_name else "")
        out.append(Sample(History(id=doc_id, text=text[:max_chars] if max_chars else text), []))
    if not out:
        raise DataError(source, f"no documents left (subsets={sorted(subsets) or 'all'}, min_chars={min_chars})")
    samples = Samples(out, source=source, quirks=quirks)
    samples.log_quirks("pile")
    return samples


@register("dataset", "pile", aliases=("pile_sample",))
def load_pile(cfg: Any) -> Samples:
    return load_pile_docs(cfg)
