"""``protocol_pure``: under ``protocol_pure=true`` no gold field reaches the system.

Each of the first history's first two questions is asked five times, once per LoCoMo category, each
copy with its own gold answer, adversarial distractor, evidence and gold ``meta`` values, all marked
with a token no history contains. The run goes through the evaluator with ``protocol_pure=true``
(which hands the system :func:`ctxbench.qa.forms.without_gold`'s question): the token must appear in
no prompt the system sends (construction or answer), no reply it returns and no meta it records,
and the five copies of a question must get the same prompts and the same answer — nothing chosen by
the gold category. A system that reaches the gold another way (the caller's frame, the dataset
file) shows the token.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ctxbench.check.harness import run
from ctxbench.check.result import Fail
from ctxbench.core.types import Question, Sample

MARK = "zqgold"  # in no history: its appearance anywhere the system wrote means gold reached it
FIELDS = ("answer", "adversarial_answer", "evidence", "meta.outputs", "meta.evidence_sessions")


def variants(q: Question, i: int) -> list[Question]:
    """``q`` once per LoCoMo category, every gold field marked (which field and which copy: in the mark)."""
    from ctxbench.data.categories import LOCOMO_CATEGORIES

    out = []
    for c in range(1, 6):
        tag = f"{i}x{c}"
        meta = dict(q.meta or {})
        meta.update(outputs=[f"{MARK}outputs{tag}"], evidence_sessions=[f"{MARK}evidencesession{tag}"])
        out.append(replace(q, id=f"{q.id}~pure{c}", answer=f"{MARK}answer{tag}", category=c,
                           category_name=str(LOCOMO_CATEGORIES.get(c, "")), evidence=[f"{MARK}evidence{tag}"],
                           adversarial_answer=f"{MARK}distractor{tag}", meta=meta))
    return out


def check(ctx: Any) -> str:
    sample = ctx.samples[0]
    asked = sample.questions[:2]
    questions = [v for i, q in enumerate(asked) for v in variants(q, i)]
    r = run(ctx.target, [Sample(sample.history, questions)], ctx.out / "protocol_pure", protocol_pure=True)
    sent = r.inner.sent if r.inner is not None else []
    for qid, phase, text in sent:
        if MARK in text.lower():
            raise Fail(f"under protocol_pure the gold {_field(text)} reached a {phase} prompt"
                       f"{' (question ' + qid + ')' if qid else ''}")
    import json

    for rec in r.records:
        for key in ("raw_prediction", "meta"):
            if MARK in json.dumps(rec.get(key, "")).lower():
                raise Fail(f"under protocol_pure the gold {_field(json.dumps(rec.get(key)))} reached the system: "
                           f"it is in question {rec['id']}'s {key}")
    for i, q in enumerate(asked):
        ids = [v.id for v in variants(q, i)]
        prompts = [[t for qid, ph, t in sent if qid == v and ph == "answer"] for v in ids]
        if any(p != prompts[0] for p in prompts):
            c = next(n for n, p in enumerate(prompts, 1) if p != prompts[0])
            raise Fail(f"under protocol_pure question {q.id} gets another answer prompt in category {c} than in "
                       "category 1 (a prompt chosen by the gold category)")
        raws = [next(rec["raw_prediction"] for rec in r.records if rec["id"] == v) for v in ids]
        if any(x != raws[0] for x in raws):
            raise Fail(f"under protocol_pure question {q.id} gets another answer when only its gold fields change")
    return (f"{len(asked)} questions x 5 gold labels: no gold in {len(sent)} prompts, replies or meta; "
            "the same prompts and answer for every label")


def _field(text: str) -> str:
    low = text.lower()
    at = low.find(MARK)
    word = low[at + len(MARK):at + len(MARK) + 20]
    for name in ("answer", "distractor", "evidencesession", "evidence", "outputs"):
        if word.startswith(name):
            return {"distractor": "adversarial distractor", "evidencesession": "evidence session",
                    "outputs": "expected outputs"}.get(name, name)
    return "field"
