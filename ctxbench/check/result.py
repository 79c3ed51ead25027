"""A check's outcome and the table ``check`` prints: check → pass / fail / skip, the reason, the seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.core.errors import CtxbenchError

PASS, FAIL, SKIP = "pass", "fail", "skip"


class Fail(Exception):
    """Raised by a check: what the system did wrong, in one line."""


class Skip(Exception):
    """Raised by a check that does not apply (one line: why)."""


class CheckFailed(CtxbenchError):
    """``check`` found a failure (the table above says which and why)."""


@dataclass
class CheckResult:
    check: str
    status: str  # pass | fail | skip
    reason: str
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "reason": self.reason, "seconds": round(self.seconds, 2)}


def table(label: str, results: list[CheckResult]) -> str:
    """The lines ``check`` prints for ``label`` (``memory=NAME``)."""
    width = max([len(r.check) for r in results] + [5])
    lines = [f"check {label}"]
    for r in results:
        lines.append(f"  {r.check:<{width}}  {r.status:<4}  {r.seconds:6.1f}s  {r.reason}")
    lines.append(summary(label, results))
    return "\n".join(lines)


def summary(label: str, results: list[CheckResult]) -> str:
    n = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, SKIP)}
    secs = sum(r.seconds for r in results)
    failed = [r.check for r in results if r.status == FAIL]
    tail = f": {', '.join(failed)} failed" if failed else ""
    return f"{label}: {n[PASS]} passed, {n[FAIL]} failed, {n[SKIP]} skipped in {secs:.1f}s{tail}"
