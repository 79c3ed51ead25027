"""``concurrency``: the records at ``concurrency=N`` (4 by default) equal those at 1, timings aside.

The scripted model answers each call after a short delay, so the calls of several workers overlap:
a system that keeps per-answer state on the instance (the contract: it belongs in the ``answer``
call) gives another question's state to an answer and its record differs.
"""
from __future__ import annotations

from typing import Any

from ctxbench.check.harness import first_difference, run, untimed
from ctxbench.check.result import Fail, Skip


def check(ctx: Any) -> str:
    if ctx.target.kind != "memory":
        raise Skip("a method decodes with its own model: eval answers its questions one at a time")
    one = untimed(ctx.baseline().records)
    many = run(ctx.target, ctx.samples, ctx.out / f"concurrency-{ctx.concurrency}", limit=ctx.limit,
               concurrency=ctx.concurrency, delay=ctx.delay)
    diff = first_difference(one, untimed(many.records))
    if diff:
        hint = ("" if getattr(ctx.target.obj, "answer_writes_state", False) else
                " (per-answer state kept on the instance? keep it in answer()'s locals, or set answer_writes_state = True)")
        raise Fail(f"records at concurrency {ctx.concurrency} differ from concurrency 1: {diff}{hint}")
    order = "in dataset order (answer_writes_state)" if getattr(ctx.target.obj, "answer_writes_state", False) \
        else "side by side"
    return f"{len(one)} records at concurrency {ctx.concurrency} ({order}) equal concurrency 1's"
