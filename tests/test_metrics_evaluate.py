"""ctxbench's QA metrics through ``evaluate.load(<local folder>)`` offline: the same numbers as ctxbench's scorer."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")  # before evaluate is imported: no hub at all

from ctxbench.metrics import evaluate_module_path  # noqa: E402
from ctxbench.metrics.aggregate import aggregate, score_records  # noqa: E402
from ctxbench.metrics.base import NOT_MENTIONED, build_metrics  # noqa: E402

# (prediction, gold, category): the per-category rules of LoCoMo's F1 all show up here
RECORDS = [
    ("hiking, painting", "painting, swimming, hiking", 1),   # multi-hop: mean of best comma parts (2/3)
    ("in 2022", "2022", 2),
    ("yes", "Yes; she likes hiking", 3),                     # open-domain: gold cut at ';' (1.0)
    ("The cat sat, on the mat.", "A cat on a mat", 4),
    ("Not mentioned in the conversation", NOT_MENTIONED, 5),  # adversarial: phrase rule (1.0)
    ("She went to Paris", "Paris", 5),                       # adversarial, answered: 0
]
MODULES = {"locomo_f1": ["f1"], "locomo_f1_set": ["f1_set"], "locomo_bleu1": ["bleu1"],
           "locomo_rouge": ["rouge1", "rouge2", "rougeL"]}


def ctxbench_scores(names, records=RECORDS):
    recs = [{"id": f"{i:08d}", "prediction": p, "answer": g, "category": c} for i, (p, g, c) in enumerate(records)]
    return aggregate(score_records(recs, build_metrics(names)), names)


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    import evaluate

    cache = tmp_path_factory.mktemp("evaluate")
    return lambda name: evaluate.load(evaluate_module_path(name), cache_dir=str(cache), keep_in_memory=True)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_local_module_gives_ctxbench_numbers(load, module):
    names = MODULES[module]
    want = ctxbench_scores(names)
    got = load(module).compute(predictions=[r[0] for r in RECORDS], references=[r[1] for r in RECORDS],
                               categories=[r[2] for r in RECORDS])
    for name in names:
        assert got[name] == want["overall"][name] and got[f"{name}_stderr"] == want["overall"][f"{name}_stderr"]
        for cat, row in want["by_category"].items():
            assert got["by_category"][cat][name] == row[name], (cat, name)
    assert set(got["by_category"]) == {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}


def test_categories_pick_the_locomo_rules(load):
    f1 = load("locomo_f1")
    preds, golds = ["hiking, painting", "yes", "Not mentioned"], ["painting, swimming, hiking", "Yes; more", "x"]
    with_cats = f1.compute(predictions=preds, references=golds, categories=[1, "open-domain", "5"])
    assert with_cats["by_category"]["multi-hop"]["f1"] == pytest.approx(0.6667)
    assert with_cats["by_category"]["open-domain"]["f1"] == 1.0
    assert with_cats["by_category"]["adversarial"]["f1"] == 1.0
    plain = f1.compute(predictions=preds, references=golds)  # no categories: every answer is plain text F1
    assert plain["f1"] == ctxbench_scores(["f1"], [(p, g, 0) for p, g in zip(preds, golds)])["overall"]["f1"]
    assert plain["f1"] < with_cats["f1"]


def test_add_batch_then_compute_with_categories(load):
    f1 = load("locomo_f1")
    for p, g, _ in RECORDS:
        f1.add_batch(predictions=[p], references=[g])
    got = f1.compute(categories=[c for *_, c in RECORDS])
    assert got["f1"] == ctxbench_scores(["f1"])["overall"]["f1"]


def test_module_path_by_metric_name_and_unknown_name(load):
    assert evaluate_module_path("rougeL") == evaluate_module_path("locomo_rouge")
    assert evaluate_module_path("f1").endswith("locomo_f1")
    with pytest.raises(KeyError, match="Did you mean 'locomo_f1'"):
        evaluate_module_path("locomo_f2")
    with pytest.raises(ValueError, match="categories has 1 entries for 2 predictions"):
        load("locomo_f1").compute(predictions=["a", "b"], references=["a", "b"], categories=[1])
