"""``suite=retrieval``: vector search latency vs number of memories, exact vs approximate (faiss).

Database and queries are random unit vectors (``dim``, default 384 = MiniLM), by default drawn
around random cluster centres (``data: clustered``, like topic-clustered sentence embeddings);
``data: uniform`` is the worst case for approximate indexes (no neighbourhood structure). For each size: build
each index, then search one query at a time (as a memory system does per question) and report p50 /
p99 latency; recall@k of an approximate index = overlap of its top-k with the exact IndexFlatIP
top-k, averaged over queries.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.memory.stores.vector import import_faiss
from ctxbench.core.registry import register
from ctxbench.bench.common import percentile, rnd

KINDS = ("flat", "hnsw", "ivf")


def unit_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def clustered_vectors(n: int, centres: np.ndarray, spread: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around random unit ``centres``: centre + ``spread`` × isotropic noise, normalised.

    Sentence embeddings are clustered by topic; with spread 1.0 a point's cosine to its centre is ≈ 0.7.
    """
    dim = centres.shape[1]
    x = centres[rng.integers(0, len(centres), n)] + spread * rng.standard_normal((n, dim), dtype=np.float32) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def make_data(kind: str, n: int, nq: int, dim: int, rng: np.random.Generator, cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(database [n, dim], queries [nq, dim]) of ``kind`` uniform | clustered."""
    if kind == "uniform":
        return unit_vectors(n, dim, rng), unit_vectors(nq, dim, rng)
    if kind == "clustered":
        per = cfg.cluster_size
        centres = unit_vectors(max(1, n // per), dim, rng)
        spread = float(cfg.spread)
        return clustered_vectors(n, centres, spread, rng), clustered_vectors(nq, centres, spread, rng)
    raise ConfigError(f"bench retrieval.data={kind!r}: choose 'clustered' or 'uniform'")


def build_index(kind: str, xb: np.ndarray, cfg: Any) -> tuple[Any, dict[str, Any]]:
    """A trained, filled faiss index of ``kind`` and its parameters."""
    faiss = import_faiss()

    n, dim = xb.shape
    if kind == "flat":
        index, params = faiss.IndexFlatIP(dim), {}
    elif kind == "hnsw":
        m = cfg.hnsw_m
        index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = cfg.ef_construction
        index.hnsw.efSearch = cfg.ef_search
        params = {"M": m, "efConstruction": index.hnsw.efConstruction, "efSearch": index.hnsw.efSearch}
    elif kind == "ivf":
        nlist = int(cfg.ivf_nlist or max(1, min(int(np.sqrt(n)), n // 39)))
        quant = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quant, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        train = xb[: min(n, max(nlist * 39, 10000))]
        index.train(train)
        index.nprobe = min(nlist, cfg.ivf_nprobe)
        params = {"nlist": nlist, "nprobe": index.nprobe}
    else:
        raise ConfigError(f"bench retrieval.indexes: unknown index {kind!r}; choose from {KINDS}")
    index.add(xb)
    return index, params


def search_each(index: Any, xq: np.ndarray, k: int) -> tuple[list[float], np.ndarray]:
    """Search one query at a time; per-query seconds and the [nq, k] ids."""
    times, ids = [], np.empty((len(xq), k), dtype=np.int64)
    for i in range(len(xq)):
        t0 = time.perf_counter()
        _, got = index.search(xq[i: i + 1], k)
        times.append(time.perf_counter() - t0)
        ids[i] = got[0]
    return times, ids


def recall_at_k(approx: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(e.tolist())) / k for a, e in zip(approx, exact)]))


@register("bench", "retrieval")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    faiss = import_faiss()

    sizes = [int(s) for s in cfg.sizes]
    dim, k, nq = cfg.dim, cfg.k, cfg.queries
    kinds = [str(x) for x in cfg.indexes]
    if "flat" not in kinds:
        kinds = ["flat", *kinds]  # recall needs the exact answer
    threads = cfg.faiss_threads
    if threads:
        faiss.omp_set_num_threads(int(threads))
    rng = np.random.default_rng(cfg.seed)
    data = cfg.data
    rows: list[dict[str, Any]] = []
    for n in sizes:
        xb, xq = make_data(data, n, nq, dim, rng, cfg)
        exact_ids = None
        flat_p50 = None
        for kind in kinds:
            t0 = time.perf_counter()
            index, params = build_index(kind, xb, cfg)
            build_s = time.perf_counter() - t0
            search_each(index, xq[: min(10, nq)], k)  # warm-up
            times, ids = search_each(index, xq, k)
            if kind == "flat":
                exact_ids = ids
            p50 = percentile(times, 50)
            if kind == "flat":
                flat_p50 = p50
            rows.append({"memories": n, "index": kind, "params": ",".join(f"{a}={b}" for a, b in params.items()) or "exact",
                         "build_s": rnd(build_s), "p50_ms": rnd(1000 * p50), "p99_ms": rnd(1000 * percentile(times, 99)),
                         "speedup_vs_flat": rnd(flat_p50 / p50) if flat_p50 and p50 else None,
                         "recall_at_k": 1.0 if kind == "flat" else rnd(recall_at_k(ids, exact_ids)),
                         "queries": nq, "k": k})
            del index
        del xb
    what = (f"random unit vectors in clusters of ~{cfg.cluster_size} (spread {cfg.spread})"
            if data == "clustered" else "uniformly random unit vectors")
    return {"description": f"Vector search, one query at a time, {dim}-d {what}, top-{k}, "
                           f"{nq} queries per cell (faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads).",
            "params": {"sizes": sizes, "dim": dim, "k": k, "queries": nq, "indexes": kinds, "data": data},
            "columns": [["memories", "memories"], ["index", "index"], ["params", "params"], ["build_s", "build s"],
                        ["p50_ms", "p50 ms"], ["p99_ms", "p99 ms"], ["speedup_vs_flat", "p50 speed-up vs flat"],
                        ["recall_at_k", f"recall@{k}"]],
            "rows": rows,
            "notes": ["recall@k = share of the exact (IndexFlatIP) top-k that the index returns, averaged over "
                      "queries; queries are drawn like the memories (same clusters).",
                      "retrieval.data=uniform gives the worst case for approximate indexes (no neighbourhood "
                      "structure: recall falls far lower); real sentence embeddings are clustered."]}
