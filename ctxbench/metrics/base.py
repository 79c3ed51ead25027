"""The metric interface, category naming, and scoring of prediction records.

A metric is registered with ``@register("metric", name)`` and is a class with ``name``,
``version`` (bumped whenever its definition changes, and written into every results.json) and
``reference`` (the code it matches), plus ``score(prediction, question) -> float | None``
(``None`` = not applicable to this question; excluded from that metric's mean).
"""
from __future__ import annotations

from typing import Any, Protocol

from ctxbench.core.errors import ConfigError
from ctxbench.core.types import Question

# category naming lives with the data (one copy): re-exported here for the metrics
from ctxbench.data.categories import ADVERSARIAL_GOLD as NOT_MENTIONED  # noqa: E402,F401
from ctxbench.data.categories import LOCOMO_CATEGORIES, canonical_name  # noqa: F401
from ctxbench.data.categories import question_category as category_name


class Metric(Protocol):
    name: str
    version: str
    reference: str

    def score(self, prediction: str, question: Question) -> float | None: ...


def reference_answer(question: Question) -> str:
    """The gold text text-overlap metrics compare with (adversarial: the 'not mentioned' option)."""
    if category_name(question) == "adversarial":
        return NOT_MENTIONED
    return answer_text(question.answer)


def answer_text(answer: Any) -> str:
    """Gold answers may be ints (6 in LoCoMo) or lists; score them as text."""
    if answer is None:
        return ""
    if isinstance(answer, (list, tuple)):
        return ", ".join(str(a) for a in answer)
    return str(answer)


JUDGE_KEYS = ("runs", "temperature", "seed")  # the ``judge:`` block of eval.yaml / score.yaml


def build_metrics(names: list[str], llm: Any = None, judge: Any = None) -> list[Metric]:
    """Instantiate metrics by registry name; metrics with ``needs_llm`` get the judge LLM and the
    ``judge`` config block (``runs``, ``temperature``, ``seed``: :mod:`.judge`)."""
    from ctxbench.core.registry import get

    opts = {k: judge[k] for k in JUDGE_KEYS if judge is not None and judge.get(k) is not None}
    out = []
    for name in names:
        cls = get("metric", str(name))
        if getattr(cls, "needs_llm", False):
            if llm is None:
                raise ConfigError(f"metric {name!r} needs an LLM: set the llm config (llm=hf|openai)")
            out.append(cls(llm=llm, **opts))
        else:
            out.append(cls())
    return out
