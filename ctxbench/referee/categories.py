"""An artifact's own category labels against LoCoMo's, by count.

Repositories disagree on which id is temporal and which open-domain (Zep's README swaps the names).
LoCoMo's own counts on locomo10.json: multi-hop 282, temporal 321, open-domain 96, single-hop 841,
adversarial 446. For the matched rows, each artifact label is set beside the LoCoMo categories of the
questions that carry it: ``consistent`` (every label is LoCoMo's own id or name for all its rows),
``swapped mapping`` (each label is exactly one LoCoMo category, but not its own: the mapping is given),
``inconsistent`` (some label spans several LoCoMo categories), or ``absent`` (the artifact has none).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from ctxbench.data.categories import LOCOMO_CATEGORIES, canonical_name

LOCOMO_FULL_COUNTS = {"multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841, "adversarial": 446}


def label_key(label: Any) -> str:
    return canonical_name(str(label))


def _own_name(label: str) -> str | None:
    """The LoCoMo category an artifact label names by itself: an id 1-5 or a category name."""
    if label.isdigit():
        return LOCOMO_CATEGORIES.get(int(label))
    return label if label in LOCOMO_FULL_COUNTS else None


def check_labels(pairs: list[tuple[Any, str]]) -> dict[str, Any]:
    """``pairs``: (the artifact's label, LoCoMo's category name) for each matched row with a label."""
    if not pairs:
        return {"verdict": "absent", "line": "category labels: the artifact carries none"}
    spans: dict[str, Counter] = {}
    for label, name in pairs:
        spans.setdefault(label_key(label), Counter())[name] += 1
    counts = {lab: sum(c.values()) for lab, c in sorted(spans.items())}
    mapping = {lab: dict(c) for lab, c in sorted(spans.items())}
    if any(len(c) > 1 for c in spans.values()):
        verdict = "inconsistent"
    elif all(_own_name(lab) == next(iter(c)) for lab, c in spans.items()):
        verdict = "consistent"
    else:
        verdict = "swapped mapping"
    out: dict[str, Any] = {"verdict": verdict, "artifact_counts": counts, "locomo_categories_per_label": mapping,
                           "locomo_full_counts": LOCOMO_FULL_COUNTS}
    if verdict == "swapped mapping":
        out["mapping"] = {lab: next(iter(c)) for lab, c in sorted(spans.items()) if _own_name(lab) != next(iter(c))}
    out["line"] = _line(out)
    return out


def _line(res: dict[str, Any]) -> str:
    if res["verdict"] == "consistent":
        return "category labels: consistent with LoCoMo's (" + ", ".join(
            f"{lab}={n}" for lab, n in res["artifact_counts"].items()) + ")"
    if res["verdict"] == "swapped mapping":
        return "category labels: SWAPPED mapping — " + ", ".join(
            f"artifact {lab} = LoCoMo {name}" for lab, name in res["mapping"].items())
    return "category labels: INCONSISTENT — " + "; ".join(
        f"artifact {lab}: " + ", ".join(f"{k} {v}" for k, v in c.items())
        for lab, c in res["locomo_categories_per_label"].items() if len(c) > 1)
