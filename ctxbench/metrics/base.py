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


def build_metrics(names: list[str], llm: Any = None, judge: Any = None) -> list[Metric]:
    """Instantiate metrics by registry name; ``llm_judge`` becomes the judge panel of the ``judge``
    config block (``panel``, ``runs``, ``temperature``, ``seed``: :mod:`.judges.panel`) on the judge
    LLM, and any other metric with ``needs_llm`` gets the judge LLM."""
    from ctxbench.core.registry import get
    from ctxbench.metrics.judges.panel import JUDGE_METRIC, build_panel, with_panel

    out = []
    for name in with_panel(names, judge):
        cls = get("metric", str(name))
        if getattr(cls, "needs_llm", False):
            if llm is None:
                raise ConfigError(f"metric {name!r} needs an LLM: set the llm config (llm=hf|openai)")
            out.extend(build_panel(llm, judge) if str(name) == JUDGE_METRIC else [cls(llm=llm)])
        else:
            out.append(cls())
    return out
