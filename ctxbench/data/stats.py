"""Counts for any loaded dataset: histories, sessions, turns, questions per category, quirks."""
from __future__ import annotations

from collections import Counter
from typing import Any

from ctxbench.core.types import Sample


def dataset_stats(samples: list[Sample]) -> dict[str, Any]:
    cats: Counter = Counter()
    names: dict[object, str] = {}
    sessions = turns = docs = chars = 0
    for s in samples:
        h = s.history
        if h.sessions:
            sessions += len(h.sessions)
            turns += sum(len(x.turns) for x in h.sessions)
        else:
            docs += 1
            chars += len(h.text)
        for q in s.questions:
            cats[q.category] += 1
            names.setdefault(q.category, q.category_name or str(q.category))
    by_cat = {names[c]: {"id": c, "n": cats[c]} for c in sorted(cats, key=lambda c: (str(type(c)), c))}
    out: dict[str, Any] = {
        "source": getattr(samples, "source", ""),
        "samples": len(samples),
        "sessions": sessions,
        "turns": turns,
        "documents": docs,
        "document_chars": chars,
        "questions": sum(cats.values()),
        "by_category": by_cat,
        "quirks": dict(getattr(samples, "quirks", {}) or {}),
    }
    if any(q.meta.get("evidence_sessions") is not None for s in samples for q in s.questions):
        from ctxbench.data.sessions import distinct_sessions  # haystacks drawn from one pool (LongMemEval)

        out["distinct"] = distinct_sessions(samples)
    return out


def format_stats(name: str, st: dict[str, Any]) -> str:
    """A markdown summary (the README's dataset table)."""
    lines = [f"## {name}", "", f"source: {st['source']}", ""]
    lines += ["| samples | sessions | turns | documents | questions |", "|---:|---:|---:|---:|---:|",
              f"| {st['samples']} | {st['sessions']} | {st['turns']} | {st['documents']} | {st['questions']} |", ""]
    if st["by_category"]:
        lines += ["| category | id | questions |", "|---|---:|---:|"]
        lines += [f"| {n} | {v['id']} | {v['n']} |" for n, v in st["by_category"].items()]
        lines += [f"| **all** | | {st['questions']} |", ""]
    if st.get("distinct"):
        d = st["distinct"]
        lines += ["| histories | session slots | distinct sessions | distinct dated sessions | turn slots | "
                  "distinct turns | repeated session share |",
                  "|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {d['histories']} | {d['session_slots']} | {d['distinct_sessions']} | {d['distinct_dated_sessions']} | "
                  f"{d['turn_slots']} | {d['distinct_turns']} | {d['repeated_session_share']:.1%} |", ""]
    if st["quirks"]:
        lines += ["| handled quirk | count |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(st["quirks"].items())]
    return "\n".join(lines).rstrip() + "\n"
