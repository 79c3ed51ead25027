"""LoCoMo question categories: the ids the official code uses, and their names.

Papers renumber these (the Mem0 paper's labels differ): always report by name, keep the id.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from ctxbench.data.errors import DataError

if TYPE_CHECKING:
    from ctxbench.core.types import Question

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
NAME_TO_ID = {v: k for k, v in LOCOMO_CATEGORIES.items()}
# The correct option of LoCoMo's two-option adversarial prompt
# ("Select the correct answer: (a) Not mentioned in the conversation (b) <adversarial_answer>").
ADVERSARIAL_GOLD = "Not mentioned in the conversation"
_UNHYPHENATED = {k.replace("-", ""): v for k, v in NAME_TO_ID.items()}


def category_name(cat: int) -> str:
    return LOCOMO_CATEGORIES.get(cat, f"category-{cat}")


def canonical_name(name: str) -> str:
    """'Multi_hop' / 'multi hop' / 'multi-hop' → 'multi-hop'."""
    return "-".join(str(name).strip().lower().replace("_", " ").split())


def question_category(question: "Question") -> str:
    """A question's category name: ``category_name`` if set, LoCoMo's name for ids 1–5, else str(id)."""
    if question.category_name:
        return canonical_name(question.category_name)
    cat: Any = question.category
    if isinstance(cat, str) and not cat.strip().lstrip("-").isdigit():
        return canonical_name(cat)
    try:
        return LOCOMO_CATEGORIES.get(int(cat), str(cat))
    except (TypeError, ValueError):
        return str(cat)


def parse_categories(values: Iterable[object] | None, where: object = "dataset.categories") -> set[int] | None:
    """``[1, "temporal", "4"]`` → ``{1, 2, 4}``; None/empty → None (no filter)."""
    if values is None:
        return None
    if isinstance(values, (str, int)):
        values = [values]
    out: set[int] = set()
    for v in values:
        key = str(v).strip().lower().replace("_", "-").replace(" ", "-")
        if key.isdigit() and int(key) in LOCOMO_CATEGORIES:
            out.add(int(key))
        elif key in NAME_TO_ID:
            out.add(NAME_TO_ID[key])
        elif key.replace("-", "") in _UNHYPHENATED:
            out.add(_UNHYPHENATED[key.replace("-", "")])
        else:
            known = ", ".join(f"{i} {n}" for i, n in LOCOMO_CATEGORIES.items())
            raise DataError(where, f"unknown LoCoMo category {v!r} (known: {known})")
    return out or None
