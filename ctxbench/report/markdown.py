"""Markdown table helpers shared by the sweep and paper-table reports."""
from __future__ import annotations

from typing import Any, Sequence

MISSING = "—"


def fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return MISSING
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(v, digits) for v in row) + " |")
    return "\n".join(lines)
