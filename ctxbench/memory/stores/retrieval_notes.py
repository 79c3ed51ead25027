"""What each answer's retrieval asked for against what the system had stored (the ``top_k`` guard).

The evaluator opens :func:`noting_retrieval` around one ``system.answer()``; every search made inside
it notes ``(k, candidates)`` with :func:`note_retrieval`: the top-k asked for and the number of stored
items it could have returned (the live vectors of the index, or those its filter allows; Mem0g's
candidate edges; ReadAgent's pages). A search with ``k >= candidates > 0`` is *exhaustive*: it returns
everything the system stored, so the answer reads the store, not a retrieval from it.
:func:`retrieval_summary` is what the record keeps (``usage.extra.retrieval``), and
:mod:`ctxbench.metrics.guards` flags the histories with an exhaustive search.

Outside an answer (construction: Mem0's update search, A-Mem's neighbours, MemoryBank's recall)
nothing is noted. The notes live in a :mod:`contextvars` variable, so answers running side by side
each note their own.

The same holds for *what* an answer retrieved (:func:`noting_retrieved`, opened by
``MemorySystem.answer``): each retrieved item's provenance (:func:`provenance`: the session and turns it
came from), in rank order, becomes ``Prediction.meta["retrieved"]`` and the evidence recall of
:mod:`ctxbench.metrics.evidence_recall`.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Iterator

from ctxbench.metrics.evidence_recall import item_sessions

@contextmanager
def _collecting(var: contextvars.ContextVar, box: Any) -> Iterator[Any]:
    """``box`` is where this context's notes of ``var`` go (a search outside any such context notes nothing)."""
    token = var.set(box)
    try:
        yield box
    finally:
        var.reset(token)


_NOTES: contextvars.ContextVar[list[tuple[int, int]] | None] = contextvars.ContextVar("ctxbench_retrieval_notes",
                                                                                      default=None)


@contextmanager
def noting_retrieval() -> Iterator[list[tuple[int, int]]]:
    """Collect the ``(k, candidates)`` of every search made in this context (one answer)."""
    with _collecting(_NOTES, []) as notes:
        yield notes


def note_retrieval(k: int, candidates: int) -> None:
    """A search for the top ``k`` of ``candidates`` stored items (nothing outside :func:`noting_retrieval`)."""
    notes = _NOTES.get()
    if notes is not None:
        notes.append((int(k), int(candidates)))


def retrieval_summary(notes: list[tuple[int, int]]) -> dict[str, Any] | None:
    """``{"searches", "exhaustive", "k", "stored"}`` (``k`` and ``stored`` of the first exhaustive search,
    else the largest of each); None when the answer searched nothing."""
    if not notes:
        return None
    full = [(k, c) for k, c in notes if c > 0 and k >= c]
    k, stored = full[0] if full else (max(k for k, _ in notes), max(c for _, c in notes))
    return {"searches": len(notes), "exhaustive": len(full), "k": k, "stored": stored}


# ---- what each answer retrieved, with its provenance (evidence recall: ctxbench/metrics/evidence_recall.py) ----
_RETRIEVED: contextvars.ContextVar[dict[Any, dict[str, Any]] | None] = contextvars.ContextVar(
    "ctxbench_retrieved", default=None)


@contextmanager
def noting_retrieved() -> Iterator[list[dict[str, Any]]]:
    """Collect, in rank order, the items retrieved in this context (one answer): the list yielded is
    filled when the context closes, one ``{"session": id or None, "turns": [ids]}`` per distinct item
    (``"sessions": [...]`` too when the item came from more than one session)."""
    out: list[dict[str, Any]] = []
    with _collecting(_RETRIEVED, {}) as items:
        try:
            yield out
        finally:
            out.extend(items.values())


def note_retrieved(key: Any, item: dict[str, Any]) -> None:
    """Item ``key`` was retrieved (``item``: :func:`provenance`); an item noted again keeps its first rank.
    Nothing is noted outside :func:`noting_retrieved` (construction's searches)."""
    items = _RETRIEVED.get()
    if items is not None and key not in items:
        items[key] = item


def provenance(meta: dict[str, Any]) -> dict[str, Any]:
    """The provenance of a stored item from its metadata: ``session`` (or ``sessions``: the first is
    ``session``) and ``turns`` (or one ``turn``); ``{"session": None, "turns": []}`` when it has none."""
    sessions = [str(s) for s in (meta.get("sessions") or ([meta["session"]] if meta.get("session") else []))]
    turns = meta.get("turns")
    if turns is None:
        turns = [meta["turn"]] if meta.get("turn") else []
    item: dict[str, Any] = {"session": sessions[0] if sessions else None, "turns": [str(t) for t in turns if t]}
    if len(sessions) > 1:
        item["sessions"] = sessions
    return item


def merged_provenance(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Record metadata keys ``session`` / ``sessions`` / ``turns`` covering both ``old`` and ``new``
    (a memory updated from another message keeps where it came from and where it was updated)."""
    a, b = provenance(old), provenance(new)
    sessions = list(dict.fromkeys(item_sessions(a) + item_sessions(b)))
    out: dict[str, Any] = {"turns": list(dict.fromkeys(a["turns"] + b["turns"]))}
    if sessions:
        out["session"] = sessions[0]
    if len(sessions) > 1:
        out["sessions"] = sessions
    return out
