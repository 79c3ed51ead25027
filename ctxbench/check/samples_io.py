"""Samples as JSON and back (the kill worker is handed the very samples the check runs on)."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ctxbench.core.types import History, Question, Sample, Session, Turn


def samples_to_json(samples: list[Sample]) -> list[dict[str, Any]]:
    return [asdict(s) for s in samples]


def samples_from_json(data: list[dict[str, Any]]) -> list[Sample]:
    out = []
    for s in data:
        h = s["history"]
        sessions = [Session(x["id"], [Turn(**t) for t in x["turns"]], x.get("date", "")) for x in h["sessions"]]
        history = History(h["id"], sessions, h.get("text", ""), list(h.get("speakers") or []))
        out.append(Sample(history, [Question(**q) for q in s["questions"]]))
    return out
