"""``ruler_match``: RULER's string_match_all for one question, 0..1.

Source: NVIDIA/RULER ``scripts/eval/synthetic/constants.py`` ``string_match_all`` (the same function in
NVIDIA/kvpress ``evaluation/benchmarks/ruler/calculate_metrics.py``): the share of the expected
strings found, case-insensitively, anywhere in the prediction. RULER reports it x100 and averaged over a
task's examples; here it is per question (0..1) and the evaluator averages it per task (the task is the
question's category). kvpress first removes control characters (``[\\x00-\\x1f]``) from the prediction
and strips it; so does this metric.

The expected strings are ``question.meta["outputs"]`` (``dataset=ruler``); a question without them
(a predictions file scored with ``python -m ctxbench score``) uses its answer split on ", " (how
``dataset=ruler`` joins them: no expected string holds a comma).
"""
from __future__ import annotations

import re

from ctxbench.core.registry import register
from ctxbench.core.types import Question
from ctxbench.metrics.base import answer_text

_CONTROL = re.compile(r"[\x00-\x1f]")


def expected_outputs(question: Question) -> list[str]:
    """The strings an answer must contain: ``meta["outputs"]``, else the answer split on ", "."""
    outputs = (question.meta or {}).get("outputs")
    if outputs:
        return [str(o) for o in outputs]
    return [p for p in answer_text(question.answer).split(", ") if p]


def string_match_all(prediction: str, outputs: list[str]) -> float:
    """Mean over ``outputs`` of (output in prediction), both lowercased; RULER's per-example score / 100."""
    if not outputs:
        return 0.0
    pred = _CONTROL.sub("", str(prediction or "").strip()).strip().lower()
    return sum(1.0 for o in outputs if o.lower() in pred) / len(outputs)


@register("metric", "ruler_match")
class RulerMatch:
    name = "ruler_match"
    version = "ruler-string-match-all-1"
    reference = "NVIDIA/RULER scripts/eval/synthetic/constants.py string_match_all (kvpress calculate_metrics.py)"

    def score(self, prediction: str, question: Question) -> float:
        return string_match_all(prediction, expected_outputs(question))
