"""Work shared across histories: results.json ``reuse`` (measured) and estimate.json ``reuse`` (planned), one shape.

Histories that share sessions (LongMemEval's haystacks are drawn from one pool) can share work that is a
pure function of the session: the run's one embedder encodes each distinct text once
(:class:`~ctxbench.memory.stores.embedder.CachingEmbedder`, an LRU of ``embedder.cache_size`` texts), and
the call cache (:mod:`ctxbench.llm.cache`, ``llm.cache``) serves a construction prompt asked for again
without a model call. The block::

    {"session_slots": n, "distinct_sessions": n, "distinct_dated_sessions": n,      (data/sessions.py)
     "embeddings": {"requested": n, "encoded": n, "evicted": n, "cache_size": n},  (null: no embedder)
     "construction_calls": {"requested": n, "served_from_cache": n,
                            "served_from_this_run": n, "served_from_earlier_runs": n},
     "counted": "this process", "resumed": bool}

``served_from_this_run``: a reply this process stored and was asked for again (a session's prompt in a
second haystack) — the saving sharing gives; ``served_from_earlier_runs``: rows an earlier run (or another
process on the same cache file) wrote — a rerun's saving, not sharing's. Counts are what this process did:
a resumed run (``resumed: true``) counts only the work after it resumed (histories answered before are not
built again; a history stopped midway resumes from its stored step), and under ``accelerate launch`` rank 0's
share. The estimate fills the same names from its plan (``encoded``: the distinct texts, with an unbounded cache;
``served_from_cache``: repeated prompts), so the two can be compared.
"""
from __future__ import annotations

from typing import Any, Iterable

from ctxbench.core.types import History
from ctxbench.data.sessions import distinct_sessions


def sessions_part(histories: Iterable[History]) -> dict[str, int]:
    d = distinct_sessions(histories)
    return {k: int(d[k]) for k in ("session_slots", "distinct_sessions", "distinct_dated_sessions")}


def measured(histories: Iterable[History], llm: Any, embedder: Any, resumed: bool) -> dict[str, Any]:
    """results.json ``reuse`` of a run over ``histories`` on the shared backend ``llm`` and ``embedder``."""
    out: dict[str, Any] = sessions_part(histories)
    counts = getattr(embedder, "reuse_counts", None)
    out["embeddings"] = counts() if callable(counts) else None
    calls = None
    if llm is not None and hasattr(llm, "meter"):
        c = llm.meter.total("construction")
        served = getattr(llm, "served_from_cache", None)
        split = (served() if callable(served) else {}).get("construction", {})
        calls = {"requested": int(c.calls), "served_from_cache": int(c.cached),
                 "served_from_this_run": int(split.get("this_run", 0)),
                 "served_from_earlier_runs": int(split.get("earlier_runs", 0))}
    out["construction_calls"] = calls
    out["counted"] = "this process"
    out["resumed"] = bool(resumed)
    return out


def planned(histories: Iterable[History], tallied: dict[str, Any]) -> dict[str, Any]:
    """estimate.json ``reuse``: the same names, from :func:`ctxbench.evaluation.estimate.tally`'s numbers."""
    out: dict[str, Any] = sessions_part(histories)
    e = tallied.get("embeddings") or {}
    out["embeddings"] = {"requested": int(e.get("requested", 0)), "encoded": int(e.get("distinct", 0))}
    c = (tallied.get("phases") or {}).get("construction") or {}
    out["construction_calls"] = {"requested": int(c.get("calls", 0)),
                                 "served_from_cache": int(c.get("cache_served_calls", 0))}
    return out


def markdown(block: dict[str, Any] | None) -> str:
    """results.md's one line on shared work ("" without a block)."""
    if not block:
        return ""
    parts = [f"{block['session_slots']} session slots, {block['distinct_sessions']} distinct sessions "
             f"({block['distinct_dated_sessions']} with their dates)"]
    e = block.get("embeddings")
    if e and e.get("requested"):
        parts.append(f"embeddings {e['requested']} requested, {e['encoded']} encoded"
                     + (f" ({e['evicted']} evicted from a cache of {e['cache_size']})" if e.get("evicted") else ""))
    c = block.get("construction_calls")
    if c and c.get("requested"):
        parts.append(f"construction calls {c['requested']} requested, {c['served_from_cache']} served from the call "
                     f"cache ({c['served_from_this_run']} stored by this run)")
    scope = "counted in this process" + (", after resuming" if block.get("resumed") else "")
    return f"\n**Shared work** ({scope}): " + "; ".join(parts) + ".\n"
