"""The metric interface, category naming, and scoring of prediction records.

A metric is registered with ``@register("metric", name)`` and is a class with ``name``,
``version`` (bumped whenever its definition changes, and written into every results.json) and
``reference`` (the code it matches), plus ``score(prediction, question) -> float | None``
(``None`` = not applicable to this question; excluded from that metric's mean).
"""
from __future__ import annotations

from typing import Any, Protocol

from ..errors import ConfigError
from ..types import Question

# LoCoMo's category ids as the official code uses them. Papers renumber them: report by name.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# The correct option of LoCoMo's two-option adversarial form; the reference text of category 5.
NOT_MENTIONED = "Not mentioned in the conversation"


class Metric(Protocol):
    name: str
    version: str
    reference: str

    def score(self, prediction: str, question: Question) -> float | None: ...


def canonical_name(name: str) -> str:
    """'Multi_hop' / 'multi hop' / 'multi-hop' → 'multi-hop'."""
    return "-".join(str(name).strip().lower().replace("_", " ").split())


def category_name(question: Question) -> str:
    """The category's name: ``category_name`` if set, LoCoMo's name for ids 1–5, else str(id)."""
    if question.category_name:
        return canonical_name(question.category_name)
    cat = question.category
    if isinstance(cat, str) and not cat.strip().lstrip("-").isdigit():
        return canonical_name(cat)
    try:
        return LOCOMO_CATEGORIES.get(int(cat), str(cat))
    except (TypeError, ValueError):
        return str(cat)


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
    from ..registry import get

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
