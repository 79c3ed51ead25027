"""ctxbench's QA metrics as local Hugging Face ``evaluate`` modules, loadable offline.

Each folder here is an ``evaluate`` metric module (``<name>/<name>.py``) that wraps the registered
ctxbench metrics: the scripts hold no metric logic, they call :func:`compute`, which scores through
:func:`ctxbench.metrics.aggregate.score_records` and :func:`~ctxbench.metrics.aggregate.aggregate`,
so ``evaluate`` and ``python -m ctxbench score`` give the same numbers by construction::

    import evaluate
    from ctxbench.metrics import evaluate_module_path

    f1 = evaluate.load(evaluate_module_path("locomo_f1"))     # works with HF_HUB_OFFLINE=1
    f1.compute(predictions=["Paris"], references=["in Paris"], categories=[4])

``categories`` (an optional keyword of ``compute``, one per prediction in the order given, also
after ``add_batch``) are LoCoMo's ids (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial) or category names; they pick the per-category rules (multi-hop comma parts,
open-domain ';' cut, adversarial "not mentioned"). Without them every answer is scored as plain text.
The folders hold no ``__init__.py`` on purpose: they are scripts for ``evaluate.load``, not modules
the registry imports.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# evaluate module → the ctxbench metrics it reports (registry names, ctxbench/metrics/qa.py)
MODULES: dict[str, list[str]] = {
    "locomo_f1": ["f1"],
    "locomo_f1_set": ["f1_set"],
    "locomo_bleu1": ["bleu1"],
    "locomo_rouge": ["rouge1", "rouge2", "rougeL"],
}


def evaluate_module_path(name: str) -> str:
    """The folder to pass to ``evaluate.load``: a module name (``locomo_f1``) or a metric name (``f1``)."""
    from ctxbench.core.registry import UnknownName, suggest

    module = name if name in MODULES else next((m for m, ms in MODULES.items() if name in ms), None)
    if module is None:
        names = list(MODULES) + [m for ms in MODULES.values() for m in ms]
        raise UnknownName(f"no evaluate module {name!r}.{suggest(name, names)}")
    return str(HERE / module)


def module_info(module: str, description: str) -> Any:
    """The ``evaluate.MetricInfo`` of a module: string predictions/references, optional categories."""
    import datasets
    import evaluate

    from ctxbench.metrics.base import build_metrics

    metrics = build_metrics(MODULES[module])
    text = {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
    return evaluate.MetricInfo(
        description=description,
        citation="; ".join(f"{m.name}: {m.reference} (ctxbench version {m.version})" for m in metrics),
        inputs_description=("predictions: answers (str); references: gold answers (str); compute(..., "
                            "categories=[...]) (optional, in the same order): LoCoMo category ids 1-5 or "
                            "names, e.g. 5 = adversarial"),
        features=datasets.Features(text),
        reference_urls=["https://github.com/snap-research/locomo"],
    )


def compute(module: str, predictions: list[str], references: list[str],
            categories: list[Any] | None = None) -> dict[str, Any]:
    """``{metric: mean, metric_stderr, by_category: {name: {n, metric...}}}`` as ctxbench's scorer gives."""
    from ctxbench.metrics.aggregate import aggregate, score_records
    from ctxbench.metrics.base import build_metrics

    names = MODULES[module]
    cats = list(categories) if categories is not None else [0] * len(predictions)
    if len(cats) != len(predictions):
        raise ValueError(f"categories has {len(cats)} entries for {len(predictions)} predictions")
    records = [{"id": f"{i:08d}", "prediction": p, "answer": r, "category": _category(c)}
               for i, (p, r, c) in enumerate(zip(predictions, references, cats))]
    agg = aggregate(score_records(records, build_metrics(names)), names)
    out: dict[str, Any] = {k: v for k, v in agg["overall"].items() if k != "n"}
    out["by_category"] = {cat: {k: v for k, v in row.items() if k != "id"} for cat, row in agg["by_category"].items()}
    return out


def _category(c: Any) -> Any:
    """'5' and 5 → 5 (LoCoMo ids); names stay names; None → 0 (plain F1)."""
    s = "" if c is None else str(c).strip()
    return int(s) if s.lstrip("-").isdigit() else (s or 0)
