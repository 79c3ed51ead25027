"""faiss vector index keyed by record id: exact inner product (``flat``) or HNSW (``hnsw``).

Rows are expected L2-normalised, so inner product is cosine similarity. The index lives in memory
and is rebuilt from the embeddings kept in SQLite (:mod:`.records`) when a run resumes.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.memory.stores.retrieval_notes import note_retrieval


def import_faiss():
    """``import faiss`` without its loader's INFO lines (``ModuleNotFoundError`` for the optional AVX2/AVX512
    builds it tries first, which look like errors). Its warnings and a failed import still show."""
    import logging

    loader = logging.getLogger("faiss.loader")
    if loader.level < logging.WARNING:
        loader.setLevel(logging.WARNING)
    import faiss

    return faiss


class VectorIndex:
    def __init__(self, dim: int, kind: str = "flat", hnsw_m: int = 32, ef_search: int = 64) -> None:
        faiss = import_faiss()

        if kind not in ("flat", "hnsw"):
            raise ConfigError(f"memory.index={kind!r}: choose 'flat' (exact) or 'hnsw'")
        self.dim, self.kind = dim, kind
        if kind == "flat":
            self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        else:
            base = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            base.hnsw.efSearch = ef_search
            self.index = faiss.IndexIDMap2(base)
        self._live: set[int] = set()

    def __len__(self) -> int:
        return len(self._live)

    def add(self, ids: Sequence[int], vecs: np.ndarray) -> None:
        if len(ids) == 0:
            return
        vecs = np.asarray(vecs, dtype=np.float32)
        if vecs.size != len(ids) * self.dim:
            from ctxbench.memory.stores.records import StoreError

            raise StoreError("vector index", f"{len(ids)} embeddings of {vecs.size // len(ids)} values for an index "
                                             f"of dimension {self.dim} (the store was built with another embedder?); "
                                             "set memory.rebuild=true or use a new hydra.run.dir")
        vecs = np.ascontiguousarray(vecs.reshape(len(ids), self.dim))
        dup = [i for i in ids if i in self._live]
        if dup:
            self.remove(dup)
        self.index.add_with_ids(vecs, np.asarray(ids, dtype=np.int64))
        self._live.update(int(i) for i in ids)

    def remove(self, ids: Iterable[int]) -> None:
        ids = [int(i) for i in ids if int(i) in self._live]
        if not ids:
            return
        self._live.difference_update(ids)
        if self.kind == "flat":  # HNSW cannot remove: dead ids are filtered at search time
            self.index.remove_ids(np.asarray(ids, dtype=np.int64))

    def search(self, query: np.ndarray, k: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
        """Top-``k`` (id, cosine) for one query vector, best first; ``allowed`` filters ids."""
        if k <= 0:
            return []
        note_retrieval(k, len(self._live) if allowed is None else len(self._live.intersection(allowed)))
        if not self._live:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(1, self.dim)
        n_total = self.index.ntotal
        fetch = min(n_total, k if (allowed is None and self.kind == "flat") else n_total)
        scores, ids = self.index.search(q, fetch)
        out = []
        for i, s in zip(ids[0], scores[0]):
            i = int(i)
            if i < 0 or i not in self._live or (allowed is not None and i not in allowed):
                continue
            out.append((i, float(s)))
            if len(out) == k:
                break
        return out
