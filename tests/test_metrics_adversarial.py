"""Category 5 (adversarial) scored two ways, as separately named metrics: LoCoMo's rule / the correct
option ("not mentioned") in ``f1``, ``f1_set``, ``bleu1``; against the item's ``adversarial_answer`` as
A-Mem's evaluation code does (``f1_adv_answer``, ``bleu1_adv_answer``), which A-Mem's Table 1 reports
and ``report table=amem_locomo_table1`` compares with in its Adversial column."""
from __future__ import annotations

import json

import pytest
import yaml

from ctxbench.metrics.aggregate import aggregate, score_records
from ctxbench.metrics.base import NOT_MENTIONED, build_metrics
from ctxbench.report.tables import load_table, table_report
from ctxbench.core.types import Question

NAMES = ["f1", "f1_set", "f1_adv_answer", "bleu1", "bleu1_adv_answer"]


def scores(prediction: str, q: Question) -> dict[str, float]:
    return {m.name: m.score(prediction, q) for m in build_metrics(NAMES)}


def adversarial(distractor: str | None = "Boston with her sister") -> Question:
    return Question("q5", "Where does Melanie's sister live?", NOT_MENTIONED, category=5,
                    category_name="adversarial", adversarial_answer=distractor)


def test_adversarial_against_the_distractor_only_in_the_adv_answer_metrics():
    q = adversarial()
    trap = scores("Boston with her sister", q)  # the answer A-Mem's code rewards
    assert trap["f1_adv_answer"] == 1.0 and trap["bleu1_adv_answer"] == pytest.approx(1.0)
    assert trap["f1"] == 0.0 and trap["f1_set"] == 0.0 and trap["bleu1"] < 0.2
    right = scores("Not mentioned in the conversation", q)  # LoCoMo's correct option
    assert right["f1"] == 1.0 and right["f1_set"] == 1.0 and right["bleu1"] == pytest.approx(1.0)
    assert right["f1_adv_answer"] == 0.0 and right["bleu1_adv_answer"] < 0.2
    # A-Mem's code scores 0 on every metric when the item has no adversarial_answer
    assert scores("Boston with her sister", adversarial(None))["f1_adv_answer"] == 0.0
    assert scores("Boston with her sister", adversarial(""))["bleu1_adv_answer"] == 0.0


@pytest.mark.parametrize("pred,gold,cat", [
    ("hiking, painting", "painting, swimming, hiking", 1), ("in May 2023", "7 May 2023", 2),
    ("yes", "Yes; she likes hiking", 3), ("The cat sat, on the mat.", "A cat on a mat", 4), ("", "Paris", 4)])
def test_other_categories_equal_f1_set_and_bleu1(pred, gold, cat):
    s = scores(pred, Question("q", "?", gold, category=cat, adversarial_answer="unused"))
    assert s["f1_adv_answer"] == s["f1_set"] and s["bleu1_adv_answer"] == s["bleu1"]


def test_scored_from_prediction_records_with_adversarial_answer():
    recs = [{"id": a, "prediction": "Boston", "answer": NOT_MENTIONED, "category": 5,
             "adversarial_answer": "Boston"} for a in ("a1", "a2")]
    recs += [{"id": "b", "prediction": "Not mentioned in the conversation", "answer": NOT_MENTIONED, "category": 5,
              "adversarial_answer": "Boston"},
             {"id": "c", "prediction": "Paris", "answer": "Paris", "category": 4}]
    agg = aggregate(score_records(recs, build_metrics(NAMES)), NAMES)
    adv = agg["by_category"]["adversarial"]
    assert adv["f1_adv_answer"] == pytest.approx(2 / 3, abs=1e-4) and adv["f1_set"] == pytest.approx(1 / 3, abs=1e-4)
    assert agg["by_category"]["single-hop"]["f1_adv_answer"] == 1.0


def test_amem_table_reads_the_adv_answer_metrics_for_its_adversarial_column(tmp_path):
    table = load_table("amem_locomo_table1")
    adv = next(c for c in table["categories"] if c["id"] == 5)
    assert adv["ours"] == {"F1": "f1_adv_answer", "BLEU-1": "bleu1_adv_answer"}
    d = tmp_path / "r"
    (d / ".hydra").mkdir(parents=True)
    config = {"seed": 0, "experiment": {"name": "amem_locomo_table1_amem", "scale": "cpu"}}
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([]))
    by_cat = {"adversarial": {"id": 5, "n": 4, "f1_set": 0.9, "f1_adv_answer": 0.5, "bleu1": 0.9,
                              "bleu1_adv_answer": 0.25},
              "multi-hop": {"id": 1, "n": 4, "f1_set": 0.3, "f1_adv_answer": 0.3, "bleu1": 0.2}}
    (d / "results.json").write_text(json.dumps({"overall": {"n": 8}, "by_category": by_cat, "cost": {},
                                                "created": "2026-01-01T00:00:00Z", "config": config}))
    recs = {(r["cell"], r["name"], r["metric"]): r for r in table_report("amem_locomo_table1", [tmp_path],
                                                                         tmp_path / "t.md")["records"]}
    assert recs[("amem", "adversarial", "F1")]["ours"] == pytest.approx(50.0)      # not f1_set's 90
    assert recs[("amem", "adversarial", "BLEU-1")]["ours"] == pytest.approx(25.0)
    assert recs[("amem", "multi-hop", "F1")]["ours"] == pytest.approx(30.0)        # the table's F1 = f1_set
