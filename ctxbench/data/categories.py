"""LoCoMo question categories: the ids the official code uses, and their names.

Papers renumber these (the Mem0 paper's labels differ): always report by name, keep the id.
"""
from __future__ import annotations

from dataclasses import dataclass
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


# ---------------------------------------------------------------------------------------------------
# Category ids checked by count. LoCoMo's own file (locomo10.json) has these many questions per id;
# repositories and papers renumber them (Zep's README swaps temporal and open-domain), so a set of
# labels is checked against the counts before its per-category numbers are read by name.
LOCOMO_COUNTS: dict[int, int] = {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
#: The ten conversations of the full LoCoMo file, in file order (locomo-audit's ``locomo_<i>``).
LOCOMO10_IDS: tuple[str, ...] = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47",
                                 "conv-48", "conv-49", "conv-50")


@dataclass(frozen=True)
class CategoryFit:
    """What :func:`category_fit` found.

    ``verdict``: ``fits`` (every id has LoCoMo's count for that id; ids may be missing, e.g. an artifact
    without adversarial questions), ``relabelled`` (every count is LoCoMo's count of *another* id:
    ``relabel`` maps each id given to LoCoMo's id with that count) or ``mismatch`` (neither: a subset of
    the questions, or a different file). ``line``: one sentence saying so, for a warning or a report.
    """

    verdict: str
    counts: dict[Any, int]
    relabel: dict[Any, int]
    line: str

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"


def _id_of(key: Any) -> Any:
    """``1`` / ``"1"`` → 1; a LoCoMo name → its id; anything else as given."""
    if isinstance(key, bool):
        return key
    if isinstance(key, int):
        return key
    text = str(key).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    return NAME_TO_ID.get(canonical_name(text), _UNHYPHENATED.get(canonical_name(text).replace("-", ""), key))


def _label(i: Any) -> str:
    return f"{i} {LOCOMO_CATEGORIES[i]}" if i in LOCOMO_CATEGORIES else str(i)


def category_fit(counts: dict[Any, int]) -> CategoryFit:
    """Check question counts per category id (``{1: 282, "2": 321, ...}``; LoCoMo names are read as
    their ids) against LoCoMo's full set (:data:`LOCOMO_COUNTS`): do these labels mean what LoCoMo's
    ids mean? Meaningful for the full question set only (a subset's counts are a ``mismatch``)."""
    got: dict[Any, int] = {}
    for k, v in counts.items():
        got[_id_of(k)] = got.get(_id_of(k), 0) + int(v)
    ids = sorted(got, key=str)
    if got and all(LOCOMO_COUNTS.get(i) == got[i] for i in ids):
        missing = [i for i in LOCOMO_COUNTS if i not in got]
        tail = f" (no questions of {', '.join(_label(i) for i in missing)})" if missing else ""
        return CategoryFit("fits", got, {}, f"category ids fit LoCoMo's counts{tail}")
    by_count = {c: i for i, c in LOCOMO_COUNTS.items()}  # the five counts differ, so a count names an id
    relabel = {i: by_count[got[i]] for i in ids if got[i] in by_count}
    if got and len(relabel) == len(ids) and len(set(relabel.values())) == len(ids):
        moved = "; ".join(f"id {i} has {got[i]} questions (LoCoMo's {_label(relabel[i])})"
                          for i in ids if relabel[i] != i)
        return CategoryFit("relabelled", got, relabel,
                           f"category ids do not fit LoCoMo's counts, they look relabelled: {moved}")
    diff = "; ".join(f"id {i}: {got[i]} (LoCoMo {LOCOMO_COUNTS[i] if i in LOCOMO_COUNTS else 'has no such id'})"
                     for i in ids if LOCOMO_COUNTS.get(i) != got[i])
    return CategoryFit("mismatch", got, {}, f"category counts do not fit LoCoMo's full set: {diff}")


ABSTENTION_SUFFIX = "_abs"  # LongMemEval: a question id ending so is unanswerable (its answer says why)


def is_abstention(question: "Question") -> bool:
    """An abstention question (LongMemEval): ``meta["abstention"]`` or an id ending ``_abs``."""
    return bool((question.meta or {}).get("abstention")) or str(question.id).endswith(ABSTENTION_SUFFIX)


def record_is_abstention(record: dict) -> bool:
    """The same for a prediction record (its ``abstention`` field or its ``id``)."""
    return bool(record.get("abstention")) or str(record.get("id", "")).endswith(ABSTENTION_SUFFIX)
