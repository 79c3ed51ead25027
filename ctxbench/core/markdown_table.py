"""The one markdown table renderer: eval results, task results, paper reports and bench all print here."""
from __future__ import annotations

from typing import Any, Callable, Sequence

MISSING = "—"


def fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return MISSING
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def cell(v: Any, digits: int = 4, formatter: Callable[[Any], str] | None = None) -> str:
    """A value as table text; ``|`` and newlines are escaped so a cell never breaks its row."""
    text = formatter(v) if formatter is not None else fmt(v, digits)
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4,
             formatter: Callable[[Any], str] | None = None) -> str:
    """``| h1 | h2 |`` / ``|---|---|`` / one line per row; cells through ``formatter`` (default :func:`fmt`)."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(cell(v, digits, formatter) for v in row) + " |")
    return "\n".join(lines)
