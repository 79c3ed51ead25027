"""``ruler_match`` / ``ruler_match_kvpress``: RULER's string_match_all for one question, 0..1.

Source: NVIDIA/RULER ``scripts/eval/synthetic/constants.py`` ``string_match_all`` (the same function in
NVIDIA/kvpress ``evaluation/benchmarks/ruler/calculate_metrics.py``): the share of the expected
strings found, case-insensitively, anywhere in the prediction. RULER reports it x100 and averaged over a
task's examples; here it is per question (0..1) and the evaluator averages it per task (the task is the
question's category).

The two sources read the prediction differently before matching, and each metric is named for its own:

- ``ruler_match`` (RULER, ``scripts/eval/evaluate.py`` ``postprocess_pred``): strip, replace every
  control character (``[\\x00-\\x1f]``) with a newline, strip again;
- ``ruler_match_kvpress`` (kvpress ``calculate_metrics.py``): strip, *remove* the control characters.

They differ when a control character splits an expected string ("12\\n34" holds "1234" for kvpress,
not for RULER). Before issue 54 ``ruler_match`` was kvpress's reading under RULER's name.

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
READINGS = {"ruler": "\n", "kvpress": ""}  # what each source puts in place of a control character


def expected_outputs(question: Question) -> list[str]:
    """The strings an answer must contain: ``meta["outputs"]``, else the answer split on ", "."""
    outputs = (question.meta or {}).get("outputs")
    if outputs:
        return [str(o) for o in outputs]
    return [p for p in answer_text(question.answer).split(", ") if p]


def postprocess(prediction: str, source: str = "ruler") -> str:
    """The prediction as ``source`` (``ruler`` | ``kvpress``) reads it before matching."""
    return _CONTROL.sub(READINGS[source], str(prediction or "").strip()).strip()


def string_match_all(prediction: str, outputs: list[str], source: str = "ruler") -> float:
    """Mean over ``outputs`` of (output in prediction), both lowercased; RULER's per-example score / 100."""
    if not outputs:
        return 0.0
    pred = postprocess(prediction, source).lower()
    return sum(1.0 for o in outputs if o.lower() in pred) / len(outputs)


@register("metric", "ruler_match")
class RulerMatch:
    name = "ruler_match"
    version = "ruler-string-match-all-2"
    reference = ("NVIDIA/RULER scripts/eval/evaluate.py postprocess_pred (control characters -> newline) + "
                 "scripts/eval/synthetic/constants.py string_match_all")
    source = "ruler"

    def score(self, prediction: str, question: Question) -> float:
        return string_match_all(prediction, expected_outputs(question), self.source)


@register("metric", "ruler_match_kvpress")
class RulerMatchKvpress(RulerMatch):
    name = "ruler_match_kvpress"
    version = "kvpress-string-match-all-1"
    reference = ("NVIDIA/kvpress evaluation/benchmarks/ruler/calculate_metrics.py (control characters removed) + "
                 "string_match_all")
    source = "kvpress"
