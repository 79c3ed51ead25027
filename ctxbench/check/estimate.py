"""``estimate``: ``eval estimate=true`` against the measured run, where the class plans its calls.

A memory system that declares ``estimate_calls`` is planned as ``estimate=true`` plans it (a fresh
instance per history on a tokenizer-only stand-in that counts as the scripted model does); the calls
per phase must equal the ``eval`` run's and the input tokens lie within the tolerance (the class's
``estimate_tolerance``, else ``check``'s; calls estimated by a rule get the same tolerance).
A class without ``estimate_calls`` is one line saying so.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ctxbench.check.result import Fail, Skip

# docs/estimate.md: the built-ins whose prompts show model output, estimated by a rule sized for a real model
# (A-Mem: 0.5 on longmemeval_sample in tests/test_estimate.py; its answers over the scripted model's short notes on
# locomo_sample come out 71% under the rule's note size)
BUILTIN_TOLERANCE = {"amem": 0.75, "mem0": 0.35, "mem0g": 0.35, "memgpt": 0.35, "memorybank": 0.35}


def check(ctx: Any) -> str:
    t = ctx.target
    if t.kind != "memory":
        raise Skip("a method's estimate is eval's own (prefill tokens and one answer call per question)")
    if not callable(getattr(t.obj, "estimate_calls", None)):
        raise Skip(f"{t.label} does not declare estimate_calls: eval estimate=true says it cannot estimate it")
    from ctxbench.core.plan import CannotEstimate
    from ctxbench.evaluation.estimate import NoEmbedder, TokenOnlyLLM, planned_questions, tally

    from ctxbench.check.doubles import CheckLLM

    words = CheckLLM().count_tokens
    llm = TokenOnlyLLM("scripted", 8192, words, lambda msgs: sum(words(m["content"]) for m in msgs))
    items: list[Any] = []
    try:
        with tempfile.TemporaryDirectory(prefix="ctxbench-check-estimate-") as tmp:
            for i, (h, qs) in enumerate(planned_questions(ctx.samples, ctx.limit)):
                system = t.build(llm=llm, embedder=NoEmbedder() if t.needs_embedder else None,
                                 workdir=Path(tmp) / str(i))
                try:
                    system.reset()
                    items.extend(system.estimate_calls(h, qs))
                finally:
                    system.close()
    except CannotEstimate as e:  # System's own estimate_calls says the class declares none
        raise Skip(f"{t.label}: {e}" if t.name not in str(e) else str(e)) from None
    est = tally(items, cache=False)["phases"]
    got = ctx.baseline().llm.meter.snapshot()
    tol = float(getattr(t.obj, "estimate_tolerance", None) or BUILTIN_TOLERANCE.get(t.name, ctx.estimate_tolerance))
    shown = []
    for phase in ("construction", "answer"):
        e, m = est[phase], got.get(phase) or {"calls": 0, "prompt_tokens": 0}
        slack = 0 if not e["estimated_calls"] else tol * max(1, m["calls"])
        if abs(e["calls"] - m["calls"]) > slack:
            raise Fail(f"{phase}: estimate=true plans {e['calls']} calls, the run made {m['calls']}")
        if abs(e["input_tokens"] - m["prompt_tokens"]) > tol * max(1, m["prompt_tokens"]):
            raise Fail(f"{phase}: estimate=true plans {e['input_tokens']} input tokens, the run sent {m['prompt_tokens']} "
                       f"(more than {tol:.0%} apart)")
        shown.append(f"{phase} {e['calls']}/{m['calls']} calls, {e['input_tokens']}/{m['prompt_tokens']} tokens")
    return f"estimate/measured: {'; '.join(shown)} (tolerance {tol:.0%})"
