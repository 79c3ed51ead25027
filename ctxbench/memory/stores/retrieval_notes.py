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
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Iterator

_NOTES: contextvars.ContextVar[list[tuple[int, int]] | None] = contextvars.ContextVar("ctxbench_retrieval_notes",
                                                                                      default=None)


@contextmanager
def noting_retrieval() -> Iterator[list[tuple[int, int]]]:
    """Collect the ``(k, candidates)`` of every search made in this context (one answer)."""
    notes: list[tuple[int, int]] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


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
