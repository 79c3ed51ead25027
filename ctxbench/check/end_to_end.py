"""``eval``: the whole ``eval`` path — every question answered through the one evaluator, the three
result files written, health ok, each answer post-processed once by the run's answer prompt."""
from __future__ import annotations

import json
from typing import Any

from ctxbench.check.result import Fail


def system(ctx: Any) -> str:
    base = ctx.baseline()
    res = ctx.results()
    n = len(base.records)
    if n != ctx.n_questions:
        raise Fail(f"{n} records for {ctx.n_questions} questions")
    for name in ("results.json", "results.md", "predictions.jsonl"):
        if not (base.out / name).is_file():
            raise Fail(f"no {name} in {base.out}")
    health = res.get("health") or {}
    if health.get("status") != "ok":
        raise Fail(f"health {health.get('status')}: {health.get('reason')}")
    prompt = ctx.target.prompt()
    questions = {q.id: q for s in ctx.samples for q in s.questions}
    for rec in base.records:
        if rec.get("failed"):
            raise Fail(f"question {rec['id']} failed: {rec.get('error')}")
        if rec["prediction"] != prompt.postprocess(questions[rec["id"]], rec["raw_prediction"]):
            raise Fail(f"question {rec['id']}: the prediction is not the answer prompt's post-processing of the raw text")
    unknown = dict(base.inner.unknown) if base.inner is not None else {}
    note = (f"; {sum(unknown.values())} calls got the scripted model's generic reply (add SCRIPTED replies beside "
            "the prompts to script them)") if unknown else ""
    f1 = (res.get("overall") or {}).get("f1")
    score = f", F1 {f1:.3f}" if isinstance(f1, (int, float)) else ""
    return f"{n} answers, results.json / results.md / predictions.jsonl written, health ok{score}{note}"


def dataset(ctx: Any) -> str:
    """The dataset through ``eval`` with memory=no_context on the scripted model (a few questions)."""
    from ctxbench.check.harness import finish, run
    from ctxbench.check.target import resolve

    target = resolve("memory", "no_context")
    r = run(target, ctx.samples, ctx.out / "eval", limit=ctx.limit or 8)
    res = finish(r, target)
    n = (res.get("overall") or {}).get("n")
    if not n:
        raise Fail("eval scored no question")
    return f"eval memory=no_context answered and scored {n} questions"


def metric(ctx: Any) -> str:
    """The metric scoring an eval run (memory=no_context on the scripted model): a number in results.json."""
    from ctxbench.check.harness import run
    from ctxbench.check.target import resolve
    from ctxbench.evaluation.finalize import finalize
    from ctxbench.metrics.base import build_metrics

    if getattr(ctx.target.obj, "needs_llm", False):
        from ctxbench.check.result import Skip

        raise Skip("needs_llm: scored by a judge LLM, which the check does not run")
    target = resolve("memory", "no_context")
    r = run(target, ctx.samples, ctx.out / "eval", limit=ctx.limit or 8)
    try:
        metrics = build_metrics([ctx.target.name])
    except Exception as e:  # noqa: BLE001
        raise Fail(f"metrics=[{ctx.target.name}]: {type(e).__name__}: {e}") from None
    res = finalize(r.out, r.records, metrics, {}, "eval", with_cost=True, extra={"system": target.label}, progress=False)
    value = (res.get("overall") or {}).get(ctx.target.name)
    if not isinstance(value, (int, float)):
        raise Fail(f"results.json overall has no {ctx.target.name} ({json.dumps(res.get('overall'))[:120]})")
    return f"results.json overall {ctx.target.name} = {value:.3f} over {len(r.records)} answers"
