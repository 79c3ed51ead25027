"""``usage``: the cost recorded is the cost the backend counted.

On the ``eval`` run: the backend's calls fall in the two phases (``construction`` while ingesting,
``answer`` while answering); the answer tokens and calls of the records add up to the backend
meter's answer phase, each history's construction to its construction phase (a system that reports
its own ``construction_usage`` must report what it sent); every answer calls the backend it was
given; held text is part of the answer prompt; counts are non-negative. Answered by hand (the
``contract`` check), an answer's own ``Usage`` must not claim tokens or calls other than it made.
A method (its own model) counts its own: one call per answer, at most the answer cap's tokens.
"""
from __future__ import annotations

from typing import Any

from ctxbench.check.result import Fail

KEYS = ("prompt_tokens", "completion_tokens", "calls")
COUNTS = ("held_text", "held_kv_slots", "held_soft_slots", "memory_items", "memory_tokens", "kv_bytes",
          "answer_prompt_tokens", "answer_completion_tokens", "answer_calls")


def check(ctx: Any) -> str:
    base = ctx.baseline()
    for rec in base.records:
        u = rec["usage"]
        for key in COUNTS:
            v = u.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise Fail(f"question {rec['id']}: usage.{key} = {v!r} (a count: an int >= 0)")
    if ctx.target.kind == "method":
        return _method(ctx, base)
    meter = base.llm.meter.snapshot()
    other = sorted(set(meter) - {"construction", "answer"})
    if other:
        raise Fail(f"LLM calls under phase {other[0]!r}: they count as neither construction nor answer "
                   "(call with phase='construction' while ingesting, phase='answer' while answering)")
    for key in KEYS:
        got = sum(int(r["usage"][f"answer_{key}"]) for r in base.records)
        want = int((meter.get("answer") or {}).get(key, 0))
        if got != want:
            raise Fail(f"answer {key.replace('_', ' ')}: the records add up to {got}, the backend counted {want} "
                       "(a backend call made outside answer(), or under the wrong phase)")
    built = {}
    for rec in base.records:
        built.setdefault(rec["history_id"], rec.get("construction") or {})
    for key in KEYS:
        got = sum(int(c.get(key, 0)) for c in built.values())
        want = int((meter.get("construction") or {}).get(key, 0))
        if got != want:
            raise Fail(f"construction {key.replace('_', ' ')}: the histories record {got}, the backend counted {want} "
                       "(construction_usage() must report what ingest() sent; or a call under the wrong phase)")
    silent = [r["id"] for r in base.records if int(r["usage"]["answer_calls"]) == 0]
    if silent:
        raise Fail(f"question {silent[0]} was answered without a call to the llm the system was given: its tokens "
                   "are not counted (answer with self.llm.chat(..., phase='answer'))")
    for rec in base.records:
        u = rec["usage"]
        if u["held_text"] > u["answer_prompt_tokens"]:
            raise Fail(f"question {rec['id']}: held_text {u['held_text']} > the {u['answer_prompt_tokens']} prompt "
                       "tokens sent (held text is part of the answer prompt)")
    for usage, delta in ctx.cache.get("direct", []):
        own = (usage.answer_prompt_tokens, usage.answer_completion_tokens, usage.answer_calls)
        if any(own) and own != delta:
            raise Fail(f"answer() reports usage (prompt, completion, calls) = {own}, the backend counted {delta} "
                       "(report what the answer sent, or leave the answer fields 0: the evaluator meters them)")
    a, c = meter.get("answer") or {}, meter.get("construction") or {}
    return (f"records = backend meter: answer {a.get('calls', 0)} calls / {a.get('prompt_tokens', 0)} prompt tokens, "
            f"construction {c.get('calls', 0)} calls / {c.get('prompt_tokens', 0)} prompt tokens")


def _method(ctx: Any, base: Any) -> str:
    cap = ctx.target.build().answer_max_tokens()
    for rec in base.records:
        u = rec["usage"]
        if u["answer_calls"] < 1:
            raise Fail(f"question {rec['id']}: usage.answer_calls = 0 (a method counts its own answer calls)")
        if u["answer_completion_tokens"] > cap:
            raise Fail(f"question {rec['id']}: {u['answer_completion_tokens']} completion tokens > the answer cap {cap}")
    return f"{len(base.records)} answers, each >= 1 call and <= {cap} completion tokens"
