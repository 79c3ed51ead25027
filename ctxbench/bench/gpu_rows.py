"""The rows of ``bench suite=gpu``: each is ``ok``, ``skipped`` (with the reason: a time box spent,
no CUDA, flash_attn missing) or ``error`` (the exception's type and first line), and a part's time
box (its ``budget_s``, within the whole check's ``gpu.budget_s``) stops new rows, never a running one."""
from __future__ import annotations

import time
from typing import Any, Callable

from ctxbench.bench.common import Skip


def reason(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


class Budget:
    """Time boxes: a part's own (``part_s`` from its start) inside the whole check's (``total_s``
    from ``t0``); :meth:`spent` says why no new row may start, or None."""

    def __init__(self, total_s: float, t0: float | None = None):
        self.total_s, self.t0 = float(total_s), time.perf_counter() if t0 is None else t0
        self.part_s, self.part_t0, self.part, self.key = None, self.t0, "", ""

    def start(self, part: str, part_s: float | None, key: str | None = None) -> "Budget":
        """A new part's time box of ``part_s`` seconds from now (``key``: the setting that holds it)."""
        self.part, self.part_s, self.part_t0 = part, part_s, time.perf_counter()
        self.key = key or f"gpu.{part}.budget_s"
        return self

    def spent(self) -> str | None:
        now = time.perf_counter()
        if now - self.t0 > self.total_s:
            return f"past gpu.budget_s={self.total_s:.0f}"
        if self.part_s is not None and now - self.part_t0 > float(self.part_s):
            return f"past {self.key}={float(self.part_s):.0f}"
        return None


def guarded(base: dict[str, Any], fn: Callable[[], dict[str, Any] | list[dict[str, Any]]],
            budget: Budget | None = None, device: Any = None) -> list[dict[str, Any]]:
    """``fn()``'s row(s) with ``base`` and ``status: ok``; a :class:`Skip` or a spent budget is a
    skipped row, any other exception an error row (the check goes on with the next row)."""
    late = budget.spent() if budget is not None else None
    if late:
        return [{**base, "status": "skipped", "reason": late}]
    print(f"bench gpu: {budget.part + ': ' if budget else ''}{' '.join(str(v) for v in base.values())} ...",
          flush=True)
    try:
        out = fn()
        rows = out if isinstance(out, list) else [out]
        return [{**base, "status": "ok", **r} for r in rows]
    except Skip as e:
        return [{**base, "status": "skipped", "reason": str(e)}]
    except Exception as e:  # noqa: BLE001 - one failed row (an OOM, a dtype error) is recorded, the rest run
        return [{**base, "status": "error", "reason": reason(e)}]
    finally:
        if device is not None:
            from ctxbench.bench.gpu_models import free

            free(device)
