"""Statistics a reader can decide on (ctxbench/metrics/stats.py): Wilson intervals for J, the minimum
detectable difference, the paired bootstrap; and their place in results.json / results.md."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ctxbench.core.types import Question
from ctxbench.evaluation.finalize import finalize
from ctxbench.metrics.stats import group_statistics, mdd, paired_bootstrap, wilson


class ExactJudge:
    """A judge without an LLM: 1 when the prediction is the gold answer, else 0 (``runs`` > 1: each run
    the same label, except that run ``flip`` says 0 for every answer)."""

    name, version, reference = "llm_judge", "test-1", "tests"

    def __init__(self, runs: int = 1, flip: int | None = None):
        self.runs, self.flip = runs, flip

    def score_runs(self, prediction: str, question: Question) -> list[float]:
        label = float(prediction.strip() == question.answer.strip())
        return [0.0 if i == self.flip else label for i in range(self.runs)]

    def score(self, prediction: str, question: Question) -> float:
        runs = self.score_runs(prediction, question)
        return sum(runs) / len(runs)


def test_wilson_matches_published_values():
    # Newcombe (1998), Statistics in Medicine 17:857, method 3 (Wilson score, no continuity correction)
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)
    assert wilson(15, 148) == pytest.approx((0.0624, 0.1605), abs=5e-5)
    lo, hi = wilson(0, 10)  # the upper end for no successes: z^2 / (n + z^2)
    assert lo == 0.0 and hi == pytest.approx(1.959964 ** 2 / (10 + 1.959964 ** 2), abs=1e-6)
    assert wilson(0, 0) is None


def test_wilson_of_a_mean_over_judge_runs_lies_between_its_neighbours():
    lo4, hi4 = wilson(4, 10)
    lo5, hi5 = wilson(5, 10)
    lo, hi = wilson(4.5, 10)  # J averaged over runs: a fraction of a question per answer
    assert lo4 < lo < lo5 and hi4 < hi < hi5


def test_mdd_formula_and_its_power():
    z = 1.959964 + 0.841621  # z_{0.975} + z_{0.8}
    assert mdd(0.5, 100) == pytest.approx(z * 0.5 * (2 / 100) ** 0.5, rel=1e-5)
    assert mdd(0.5, 1) is None and mdd(None, 50) is None
    # what it claims: two systems this far apart are told apart by a two-sided 5% test about 80% of the time
    rng = np.random.default_rng(0)
    n, sd, sims = 200, 0.4, 4000
    d = mdd(sd, n)
    a = rng.normal(0.0, sd, size=(sims, n)).mean(axis=1)
    b = rng.normal(d, sd, size=(sims, n)).mean(axis=1)
    power = np.mean(np.abs(b - a) / (sd * np.sqrt(2 / n)) > 1.959964)
    assert 0.77 < power < 0.83


def test_paired_bootstrap_detects_a_planted_difference():
    rng = np.random.default_rng(1)
    a = (rng.random(300) < 0.5).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 0)[:30]] = 1.0  # B right on 30 more questions: delta = 0.1
    res = paired_bootstrap(a, b)
    assert res["n"] == 300 and res["delta"] == pytest.approx(0.1, abs=1e-9)
    assert res["ci95"][0] > 0 and res["ci95"][0] < 0.1 < res["ci95"][1] and res["p"] < 0.001
    assert paired_bootstrap(a, b) == res  # seeded: the same numbers every time
    back = paired_bootstrap(b, a)
    assert back["delta"] == pytest.approx(-0.1) and back["p"] == res["p"]


def test_paired_bootstrap_of_identical_runs():
    a = np.random.default_rng(2).random(50)
    res = paired_bootstrap(a, a.copy())
    assert res["delta"] == 0.0 and res["ci95"] is None and res["p"] is None and res["note"].startswith("no variance")


def test_no_p_value_on_tiny_or_varianceless_cells():
    """The review's cell: one temporal question, A 0.5, B 0.5714 — a bootstrap over one question has no variance,
    yet it printed p = 0.0002 and a star. Below the minimum n, or when every resample is the same, only Δ."""
    one = paired_bootstrap([0.5], [0.5714])
    assert one["delta"] == pytest.approx(0.0714) and one["p"] is None and one["ci95"] is None
    assert one["note"].startswith("n too small")
    same = paired_bootstrap([0.0] * 40, [1.0] * 40)  # every question +1: every resample gives +1
    assert same["delta"] == 1.0 and same["p"] is None and same["note"].startswith("no variance")
    nine = paired_bootstrap([0.0] * 9, [1.0, 0.0] * 4 + [1.0])
    assert nine["p"] is None and nine["n"] == 9
    ten = paired_bootstrap([0.0] * 10, [1.0, 0.0] * 5)
    assert ten["p"] is not None and ten["ci95"] is not None and "note" not in ten


def test_paired_bootstrap_interval_is_95_percent():
    """The interval's level: the 2.5th and 97.5th percentiles of the resampled means (a 90% interval labelled
    ci95 would fail here): for n = 400 iid N(0.1, 1) differences it matches mean ± 1.96 · sd/√n closely."""
    x = np.random.default_rng(5).normal(0.1, 1.0, 400)
    res = paired_bootstrap(np.zeros(400), x, resamples=20000)
    se = x.std(ddof=1) / np.sqrt(400)
    lo, hi = res["ci95"]
    assert (hi - lo) == pytest.approx(2 * 1.959964 * se, rel=0.05)
    assert (hi - lo) > 2 * 1.7 * se  # a 90% interval (± 1.645 se) is clearly narrower


def test_paired_bootstrap_of_noise_is_not_significant():
    rng = np.random.default_rng(3)
    a, b = rng.random(200), rng.random(200)  # no difference planted
    res = paired_bootstrap(a, b)
    assert res["ci95"][0] < 0 < res["ci95"][1] and res["p"] > 0.05


def test_group_statistics_for_a_binary_judge():
    rows = [{"llm_judge": float(i < 7), "f1": i / 10} for i in range(10)]
    st = group_statistics(rows, ["f1", "llm_judge"])
    assert st["llm_judge"]["wilson95"] == [round(x, 4) for x in wilson(7, 10)] and st["llm_judge"]["binary"]
    assert "wilson95" not in st["f1"]
    std = float(np.std([i / 10 for i in range(10)], ddof=1))
    assert st["f1"]["std"] == round(std, 4) and st["f1"]["mdd"] == round(mdd(std, 10), 4)


def records(n: int = 12) -> list[dict]:
    out = []
    for i in range(n):
        cat = 4 if i % 2 else 2
        out.append({"id": f"q{i:02d}", "question": f"Q{i}", "answer": f"gold {i}", "category": cat,
                    "prediction": f"gold {i}" if i % 3 else "something else"})
    return out


def test_results_carry_mdd_and_wilson_for_j(tmp_path):
    res = finalize(tmp_path, records(), [ExactJudge()], {}, "score", with_cost=False, progress=False)
    st = res["statistics"]
    assert st["how"]["mdd"]["alpha"] == 0.05 and st["how"]["mdd"]["power"] == 0.8
    j = st["overall"]["llm_judge"]
    assert res["overall"]["llm_judge"] == round(8 / 12, 4) and j["wilson95"] == [round(x, 4) for x in wilson(8, 12)]
    assert set(st["by_category"]) == {"temporal", "single-hop"}
    assert st["by_category"]["single-hop"]["llm_judge"]["n"] == 6
    md = (tmp_path / "results.md").read_text()
    assert "## Statistics" in md and "llm_judge Wilson 95%" in md and "MDD llm_judge" in md
    lo, hi = wilson(8, 12)
    assert f"[{lo:.3f}, {hi:.3f}]" in md


def test_judge_reruns_are_reported_apart_from_reruns_of_the_system(tmp_path):
    res = finalize(tmp_path, records(), [ExactJudge(runs=3, flip=2)], {}, "score", with_cost=False, progress=False)
    means = [8 / 12, 8 / 12, 0.0]
    assert res["overall"]["llm_judge_std"] == round(float(np.std(means, ddof=1)), 4)
    md = (tmp_path / "results.md").read_text()
    assert "Judge reruns (the variance of the judge" in md and "report reruns=" in md
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["statistics"]["overall"]["llm_judge"]["binary"] is False  # a mean over 3 runs


def test_a_failed_answer_counts_as_wrong_in_every_judge_run(tmp_path):
    recs = records()
    for r in recs[:4]:  # q00 and q03 would be wrong anyway; q01 and q02 would be right
        r.update(prediction="", failed=True, error="timeout")
    res = finalize(tmp_path, recs, [ExactJudge(runs=2)], {}, "score", with_cost=False, progress=False)
    right = sum(1 for i in range(4, 12) if i % 3)  # answered and right
    assert res["overall"]["llm_judge"] == round(right / 12, 4) and res["overall"]["failed_n"] == 4
    assert res["metric_runs"]["llm_judge"]["overall"] == [round(right / 12, 4)] * 2
    assert res["answered_only"]["overall"]["llm_judge"] == round(right / 8, 4)
    assert res["statistics"]["overall"]["llm_judge"]["n"] == 12  # the interval is over every question asked
