"""``format=ctxbench`` (the default): the predictions.jsonl that ``python -m ctxbench eval`` writes, scored
as it is (its lines already carry ids, gold answers and categories: :mod:`ctxbench.data.predictions`)."""
from __future__ import annotations

from ctxbench.core.registry import register


@register("format", "ctxbench")
class CtxbenchFormat:
    name = "ctxbench"
    description = "ctxbench predictions.jsonl (an eval run's own lines; no matching needed)"
    metrics: list[str] = []  # score's metrics= as given
    stored_metrics: dict[str, str] = {}
    native = True
