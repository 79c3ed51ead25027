"""Bootstrap standard errors of every per-category and overall metric (``<metric>_stderr``)."""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from ctxbench.evaluation.evaluator import finalize
from ctxbench.metrics.aggregate import aggregate, bootstrap_stderr
from ctxbench.metrics.base import build_metrics
from ctxbench.runs.results import results_markdown

NAMES = ["f1", "f1_set", "bleu1", "rouge1", "rouge2", "rougeL"]


def _rows(values: dict[str, list[float | None]], category: int = 1, name: str = "multi-hop") -> list[dict]:
    n = len(next(iter(values.values())))
    return [{"id": f"q{i}", "category": category, "category_name": name, **{k: v[i] for k, v in values.items()}}
            for i in range(n)]


def test_bootstrap_stderr_of_a_proportion_matches_the_closed_form():
    rng = np.random.default_rng(7)
    x = (rng.random(400) < 0.3).astype(float)
    p = x.mean()
    (se,) = bootstrap_stderr(x)
    assert se == pytest.approx(math.sqrt(p * (1 - p) / 400), rel=0.08)
    agg = aggregate(_rows({"f1": list(x)}), ["f1"])
    assert agg["overall"]["f1_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / 400), rel=0.08)
    assert agg["by_category"]["multi-hop"]["f1_stderr"] == agg["overall"]["f1_stderr"]


def test_stderr_shrinks_with_n_and_is_zero_for_constant_scores():
    rng = np.random.default_rng(0)
    small = aggregate(_rows({"f1": list(rng.random(10))}), ["f1"])["overall"]["f1_stderr"]
    large = aggregate(_rows({"f1": list(rng.random(1000))}), ["f1"])["overall"]["f1_stderr"]
    assert large < small / 5
    assert aggregate(_rows({"f1": [0.5] * 20}), ["f1"])["overall"]["f1_stderr"] == 0.0


def test_stderr_is_reproducible_and_independent_of_record_order():
    rng = np.random.default_rng(3)
    rows = _rows({m: list(rng.random(50)) for m in NAMES})
    a, b = aggregate(rows, NAMES), aggregate(rows, NAMES)
    assert a == b
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    assert aggregate(shuffled, NAMES) == a
    other_seed = aggregate(rows, NAMES, seed=99)
    assert other_seed["overall"]["f1_stderr"] != a["overall"]["f1_stderr"]
    assert other_seed["overall"]["f1_stderr"] == pytest.approx(a["overall"]["f1_stderr"], rel=0.15)


def test_stderr_is_none_below_two_questions():
    one = aggregate(_rows({"f1": [1.0]}), ["f1"])
    assert one["overall"]["f1"] == 1.0 and one["overall"]["f1_stderr"] is None
    assert one["by_category"]["multi-hop"]["f1_stderr"] is None
    empty = aggregate([], ["f1"])
    assert empty["overall"] == {"n": 0, "f1": None, "f1_stderr": None}


def test_metric_that_skips_some_questions_is_bootstrapped_over_those_it_scores():
    # llm_judge-like: None for three questions; its stderr comes from the 2 it scored, f1 from all 5
    rows = _rows({"f1": [1.0, 0.0, 1.0, 0.0, 1.0], "judge": [1.0, 0.0, None, None, None]})
    ov = aggregate(rows, ["f1", "judge"])["overall"]
    assert ov["judge_n"] == 2 and ov["judge"] == 0.5
    assert ov["judge_stderr"] is not None and 0.2 < ov["judge_stderr"] < 0.5
    only_one = aggregate(_rows({"judge": [1.0, None, None]}), ["judge"])["overall"]
    assert only_one["judge_n"] == 1 and only_one["judge_stderr"] is None


def test_bootstrap_is_fast_for_two_thousand_questions_and_six_metrics():
    rng = np.random.default_rng(1)
    rows = [{"id": i, "category": i % 5 + 1, "category_name": f"c{i % 5}", **{m: float(rng.random()) for m in NAMES}}
            for i in range(2000)]
    aggregate(rows[:10], NAMES)  # warm-up
    t = time.perf_counter()
    res = aggregate(rows, NAMES)
    assert time.perf_counter() - t < 1.0
    assert all(res["by_category"][c][f"{m}_stderr"] > 0 for c in res["by_category"] for m in NAMES)


def test_results_md_shows_mean_plus_minus_stderr():
    res = aggregate(_rows({"f1": [1.0, 0.0, 1.0, 1.0]}) + _rows({"f1": [1.0]}, 2, "temporal"), ["f1"])
    md = results_markdown(res, ["f1"])
    se = res["by_category"]["multi-hop"]["f1_stderr"]
    assert f"| multi-hop | 1 | 4 | 0.7500 ± {se:.4f} |" in md
    assert "| temporal | 2 | 1 | 1.0000 |" in md  # n = 1: the mean alone
    assert "bootstrap standard error" in md and "1000 resamples" in md


def test_finalize_writes_stderr_into_results_json_and_md(tmp_path):
    recs = [{"id": f"q{i}", "prediction": "paris" if i % 2 else "rome", "answer": "Paris", "category": 4}
            for i in range(6)] + [{"id": "t0", "prediction": "may", "answer": "May 7", "category": 2}]
    ms = build_metrics(["f1", "rouge1"])
    finalize(tmp_path, recs, ms, {}, "score", with_cost=False, progress=False)
    res = json.loads((tmp_path / "results.json").read_text())
    sh = res["by_category"]["single-hop"]
    assert sh["f1"] == 0.5 and sh["f1_stderr"] == pytest.approx(math.sqrt(0.25 / 6), rel=0.2)
    assert res["by_category"]["temporal"]["f1_stderr"] is None
    assert res["overall"]["rouge1_stderr"] > 0 and res["stderr"]["seed"] == 1234
    md = (tmp_path / "results.md").read_text()
    assert f"| single-hop | 4 | 6 | 0.5000 ± {sh['f1_stderr']:.4f} |" in md
