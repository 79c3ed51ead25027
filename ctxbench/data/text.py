"""Plain text and JSONL text corpora (one document per file, or per JSONL line's ``text``).

``dataset=text dataset.path=../shared/data/tinyshakespeare.txt``, ``dataset=text_sample`` and
``dataset=shakespeare_sample`` (the samples shipped in data/samples/) all load here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.core.registry import register
from ctxbench.core.types import History, Sample
from ctxbench.data.bounds import check_file_size, decode_utf8, read_bounded
from ctxbench.data.errors import DataError
from ctxbench.data.paths import resolve
from ctxbench.data.records import field, iter_jsonl


def read_text_documents(path: Path, text_field: str = "text", limit: int | None = None) -> list[str]:
    """Documents from a .txt (whole file, or one per blank-line block if ``split``) or .jsonl file."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".txt", ".jsonl", ".json"))
        docs: list[str] = []
        for f in files:
            docs.extend(read_text_documents(f, text_field))
        return docs[:limit] if limit else docs
    if path.suffix == ".jsonl":
        docs = []
        for i, rec in iter_jsonl(path):
            docs.append(field(rec, text_field, str, path, f"line {i}"))
            if limit and len(docs) >= limit:
                break
        return docs
    check_file_size(path)
    raw = decode_utf8(read_bounded(path), path)
    if not raw.strip():
        raise DataError(path, "file is empty")
    return [raw]


def text_samples(cfg: Any) -> list[Sample]:
    path = resolve(cfg.path)
    docs = read_text_documents(path, cfg.text_field, cfg.limit)
    max_chars = cfg.max_chars
    return [Sample(History(id=f"{path.stem}-{i}", text=d[:max_chars] if max_chars else d), [])
            for i, d in enumerate(docs)]


@register("dataset", "text")
def load_text(cfg: Any) -> list[Sample]:
    return text_samples(cfg)


@register("dataset", "text_sample")
def load_text_sample(cfg: Any) -> list[Sample]:
    return text_samples(cfg)


@register("dataset", "shakespeare_sample")
def load_shakespeare_sample(cfg: Any) -> list[Sample]:
    """The default ``train`` text: ~100 KB of Tiny Shakespeare (public domain) in data/samples/."""
    return text_samples(cfg)
