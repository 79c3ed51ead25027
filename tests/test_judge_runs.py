"""Repeated judging: ``judge.runs=N`` judges every answer N times with seeds seed..seed+N-1, each run its
own call and call-cache key; results carry J = mean over runs and ``llm_judge_std`` (std over runs).

The judge double answers by seed: run ``s`` labels question ``q`` CORRECT unless ``crc32("s-q") % 3 == 0``
(:func:`correct`), so the per-run J values differ and are known without the code under test.
"""
from __future__ import annotations

import json
import re
import sqlite3
import statistics
import zlib

import pytest
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.evaluation.evaluator import finalize
from ctxbench.llm.base import ChatResult, UsageMeter
from ctxbench.llm.cache import CachedLLM, cache_key
from ctxbench.metrics.aggregate import aggregate, score_records
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.judge import LABEL_SCHEMA, JUDGE_PROMPT
from ctxbench.config.compose import option_config


def correct(seed: int, q: int) -> bool:
    return zlib.crc32(f"{seed}-{q}".encode()) % 3 != 0


class SeedJudge:
    """A judge backend whose label depends on the call's seed and the question number (``Q7`` → 7)."""

    model_name = cache_id = "seed-judge"
    context_window = 4096

    def __init__(self) -> None:
        self.meter = UsageMeter()
        self.calls: list[dict] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages, *, max_new_tokens=64, temperature=0.0, phase="answer", json_mode=False,
             schema=None, **kw):
        self.calls.append({"seed": kw.get("seed", "absent"), "temperature": temperature, "kw": sorted(kw)})
        q = int(re.search(r"Question: Q(\d+)", messages[-1]["content"]).group(1))
        seed = kw.get("seed") or 0
        label = "CORRECT" if correct(seed, q) else "WRONG"
        r = ChatResult(json.dumps({"label": label}), 10, 3)
        self.meter.add(phase, r)
        return r


def records(n: int = 6) -> list[dict]:
    """n answered questions, alternating two categories (ids 1 and 2)."""
    return [{"id": f"q{i}", "question": f"Q{i}", "prediction": "an answer", "answer": "gold",
             "category": 1 + i % 2} for i in range(n)]


def expected_run_means(ids: list[int], seeds: list[int]) -> list[float]:
    return [sum(correct(s, q) for q in ids) / len(ids) for s in seeds]


def judge(tmp_path, runs: int, temperature: float = 0.7, seed: int = 0, inner: SeedJudge | None = None):
    inner = inner or SeedJudge()
    llm = CachedLLM(inner, tmp_path / "judge.sqlite", backend="seedjudge")
    (m,) = build_metrics(["llm_judge"], llm=llm, judge=OmegaConf.create(
        {"runs": runs, "temperature": temperature, "seed": seed}))
    return m, inner


def test_runs_differ_and_mean_and_std_are_over_runs(tmp_path):
    m, inner = judge(tmp_path, runs=3, seed=5)
    scored = score_records(records(), [m])
    assert sorted({c["seed"] for c in inner.calls}) == [5, 6, 7] and len(inner.calls) == 18
    assert {c["temperature"] for c in inner.calls} == {0.7}
    want = expected_run_means(list(range(6)), [5, 6, 7])
    assert len(set(want)) > 1  # the runs really differ
    agg = aggregate(scored, ["llm_judge"])
    assert agg["overall"]["llm_judge"] == pytest.approx(statistics.mean(want), abs=1e-4)
    assert agg["overall"]["llm_judge_std"] == pytest.approx(statistics.stdev(want), abs=1e-4)
    assert agg["metric_runs"]["llm_judge"]["overall"] == pytest.approx(want, abs=1e-4)
    for cat, ids in (("multi-hop", [0, 2, 4]), ("temporal", [1, 3, 5])):
        per_run = expected_run_means(ids, [5, 6, 7])
        assert agg["by_category"][cat]["llm_judge"] == pytest.approx(statistics.mean(per_run), abs=1e-4)
        assert agg["by_category"][cat]["llm_judge_std"] == pytest.approx(statistics.stdev(per_run), abs=1e-4)
        assert agg["metric_runs"]["llm_judge"]["by_category"][cat] == pytest.approx(per_run, abs=1e-4)
    assert agg["metric_runs"]["llm_judge"]["identical_runs"] is False
    assert scored[0]["llm_judge_runs"] == [float(correct(s, 0)) for s in (5, 6, 7)]


def test_each_run_has_its_own_cache_key_and_a_rerun_replays_the_cache(tmp_path):
    m, inner = judge(tmp_path, runs=3)
    first = aggregate(score_records(records(), [m]), ["llm_judge"])
    with sqlite3.connect(tmp_path / "judge.sqlite") as c:
        assert c.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 18  # 6 questions × 3 runs
    m2, inner2 = judge(tmp_path, runs=3)  # same seeds, a fresh process: every call a cache hit
    again = aggregate(score_records(records(), [m2]), ["llm_judge"])
    assert inner2.calls == [] and again == first
    m3, inner3 = judge(tmp_path, runs=3, seed=1)  # seeds 1, 2, 3: run 1 and 2 replay, seed 3 is asked
    score_records(records(), [m3])
    assert {c["seed"] for c in inner3.calls} == {3} and len(inner3.calls) == 6


def test_one_run_is_todays_call_and_result(tmp_path):
    m, inner = judge(tmp_path, runs=1, temperature=0.0, seed=9)
    scored = score_records(records(), [m])
    assert {c["seed"] for c in inner.calls} == {"absent"} and all(c["kw"] == [] for c in inner.calls)
    assert "llm_judge_runs" not in scored[0]
    agg = aggregate(scored, ["llm_judge"])
    assert "metric_runs" not in agg and "llm_judge_std" not in agg["overall"]
    assert agg["overall"]["llm_judge"] == pytest.approx(expected_run_means(list(range(6)), [0])[0], abs=1e-4)
    # the cache key is the pre-repeat formula: no seed in it
    prompt = JUDGE_PROMPT.format(question="Q0", gold_answer="gold", generated_answer="an answer")
    key = cache_key("seedjudge", "seed-judge", [{"role": "user", "content": prompt}], max_new_tokens=128,
                    temperature=0.0, json_mode=True, context_window=4096, schema=LABEL_SCHEMA)
    with sqlite3.connect(tmp_path / "judge.sqlite") as c:
        assert c.execute("SELECT COUNT(*) FROM calls WHERE key=?", (key,)).fetchone()[0] == 1


def test_a_run_that_fails_counts_the_question_wrong_in_that_run(tmp_path):
    class Flaky(SeedJudge):
        def chat(self, messages, **kw):
            if kw.get("seed") == 1 and "Question: Q2" in messages[-1]["content"]:
                self.calls.append({"seed": 1})
                return ChatResult("", 0, 0, failed=True, error="down")
            return super().chat(messages, **kw)

    m, _ = judge(tmp_path, runs=2, inner=Flaky())
    scored = score_records(records(), [m])
    assert scored[2]["llm_judge_runs"][1] == 0.0 and scored[2]["llm_judge_judge_failed"] is True
    assert scored[2]["llm_judge"] == pytest.approx((float(correct(0, 2)) + 0.0) / 2)
    agg = aggregate(scored, ["llm_judge"])
    want = expected_run_means(list(range(6)), [0, 1])
    want[1] -= float(correct(1, 2)) / 6  # run 1's label of Q2 failed: counted wrong (EverMemOS), not dropped
    assert "llm_judge_n" not in agg["overall"]  # every question is in J
    assert agg["overall"]["llm_judge"] == pytest.approx(statistics.mean(want), abs=1e-4)
    assert agg["metric_runs"]["llm_judge"]["overall"] == pytest.approx(want, abs=1e-4)


def test_results_json_records_the_runs_and_the_settings(tmp_path):
    m, _ = judge(tmp_path, runs=4, temperature=1.0, seed=2)
    (tmp_path / "run").mkdir()
    res = finalize(tmp_path / "run", records(), [m], {}, "score", with_cost=False, progress=False)
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert on_disk["metrics"]["llm_judge"]["runs"] == 4 and on_disk["metrics"]["llm_judge"]["seeds"] == [2, 3, 4, 5]
    assert on_disk["metrics"]["llm_judge"]["temperature"] == 1.0
    assert on_disk["metric_runs"]["llm_judge"]["runs"] == 4
    assert on_disk["overall"]["llm_judge_std"] == res["overall"]["llm_judge_std"] is not None
    line = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert len(line["llm_judge_runs"]) == 4


def test_identical_runs_are_flagged(tmp_path):
    class Greedy(SeedJudge):
        def chat(self, messages, **kw):
            kw.pop("seed", None)
            return super().chat(messages, **kw)

    m, _ = judge(tmp_path, runs=3, temperature=0.0, inner=Greedy())
    agg = aggregate(score_records(records(), [m]), ["llm_judge"])
    assert agg["metric_runs"]["llm_judge"]["identical_runs"] is True and agg["overall"]["llm_judge_std"] == 0.0


def test_bad_judge_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="judge.runs=0"):
        judge(tmp_path, runs=0)
    from hydra import compose, initialize_config_dir

    from ctxbench.config.schema import check_types
    from ctxbench.core.paths import conf_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        ok = compose(config_name="eval", overrides=["judge.runs=10", "judge.temperature=0.5"])
        bad = compose(config_name="eval", overrides=["judge.runs=0"])
        hot = compose(config_name="score", overrides=["judge.temperature=3"])
    check_types(ok, "eval")
    assert (ok.judge.runs, ok.judge.seed) == (10, 0)
    with pytest.raises(ConfigError, match="judge.runs"):
        check_types(bad, "eval")
    with pytest.raises(ConfigError, match="judge.temperature"):
        check_types(hot, "score")


# ---- the seed reaches the backends -----------------------------------------------------------------

def test_openai_sends_the_seed_only_when_given(monkeypatch):
    from ctxbench.llm.openai_compat import OpenAIChatLLM

    monkeypatch.setenv("CTXBENCH_TEST_KEY", "sk-test-123456789")
    llm = OpenAIChatLLM(option_config("llm", {"name": "openai", "model": "m", "base_url": "http://127.0.0.1:9",
                                          "api_key_env": "CTXBENCH_TEST_KEY", "cache": False}))
    bodies = []
    monkeypatch.setattr(llm, "_post", lambda body, messages: bodies.append(body) or ChatResult("ok", 1, 1))
    llm.chat([{"role": "user", "content": "hi"}], seed=7)
    llm.chat([{"role": "user", "content": "hi"}])
    assert bodies[0]["seed"] == 7 and "seed" not in bodies[1]


def test_hf_seeded_sampling_is_reproducible_and_leaves_the_global_rng(tmp_path):
    import torch

    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 96, "batch_size": 2}))
    msgs = [{"role": "user", "content": "Where is Paris?"}]
    state = torch.get_rng_state()
    a = llm.chat(msgs, max_new_tokens=12, temperature=1.0, seed=1).text
    assert torch.equal(state, torch.get_rng_state())
    assert llm.chat(msgs, max_new_tokens=12, temperature=1.0, seed=1).text == a
    others = {llm.chat(msgs, max_new_tokens=12, temperature=1.0, seed=s).text for s in (2, 3, 4)}
    assert others - {a}  # another seed samples another reply


def test_the_mem0_paper_setting_judges_ten_runs():
    from hydra import compose, initialize_config_dir

    from ctxbench.core.paths import conf_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        paper = compose(config_name="eval", overrides=["experiment=mem0_locomo_table1_mem0", "scale/mem0=paper"])
        cpu = compose(config_name="eval", overrides=["experiment=mem0_locomo_table1_mem0"])
    assert (paper.judge.runs, paper.judge.temperature) == (10, 0.0) and cpu.judge.runs == 1


def test_std_over_runs_follows_the_judges_source(tmp_path):
    """EverMemOS reports np.std (ddof 0) of the per-run accuracies; a source without a std over runs gets
    the sample std (ddof 1). results.json says which convention each judge's std follows."""
    import numpy as np

    from ctxbench.metrics.judge import LLMJudge

    want = expected_run_means(list(range(6)), [5, 6, 7])
    for judge_name, ddof in (("evermemos", 0), ("mem0", 1)):
        llm = CachedLLM(SeedJudge(), tmp_path / f"{judge_name}.sqlite", backend="seedjudge")
        m = LLMJudge(llm, runs=3, temperature=0.7, seed=5, judge=judge_name)
        out = tmp_path / judge_name
        finalize(out, records(), [m], {"seed": 0}, "score", with_cost=False, progress=False)
        res = json.loads((out / "results.json").read_text())
        assert res["metric_runs"]["llm_judge"]["overall"] == pytest.approx(want, abs=1e-4)
        assert res["overall"]["llm_judge_std"] == pytest.approx(float(np.std(want, ddof=ddof)), abs=1e-4)
        assert res["metric_runs"]["llm_judge"]["std"]["ddof"] == ddof
        assert f"ddof {ddof}" in (out / "results.md").read_text()
        assert ("np.std" in res["metric_runs"]["llm_judge"]["std"]["convention"]) == (judge_name == "evermemos")
    assert float(np.std(want, ddof=1)) / float(np.std(want, ddof=0)) == pytest.approx(1.2247, abs=1e-4)  # ×√(3/2)


class FlakyJudge(SeedJudge):
    """Labels every answer CORRECT, except that its call for question Q1 fails (and Q2's reply has no label)."""

    def chat(self, messages, *, max_new_tokens=64, temperature=0.0, phase="answer", json_mode=False,
             schema=None, **kw):
        q = int(re.search(r"Question: Q(\d+)", messages[-1]["content"]).group(1))
        if q == 1:
            r = ChatResult("", 10, 0, failed=True)
        else:
            r = ChatResult("no idea" if q == 2 else json.dumps({"label": "CORRECT"}), 10, 3)
        self.meter.add(phase, r)
        return r


def test_a_failed_judge_call_counts_wrong_in_j_and_in_health(tmp_path):
    """EverMemOS counts an answer its judge could not label as wrong; ctxbench left it out of J, lifting J
    from 4/6 (0.6667) to 4/4 (1.0). Now J = 0.6667, J over the labelled alone beside it, health counts it."""
    llm = CachedLLM(FlakyJudge(), tmp_path / "j.sqlite", backend="flaky")
    (m,) = build_metrics(["llm_judge"], llm=llm, judge=OmegaConf.create({"runs": 1, "temperature": 0.0, "seed": 0}))
    recs = [dict(r, usage={"answer_calls": 1}, history_id="h") for r in records()]
    out = tmp_path / "run"
    finalize(out, recs, [m], {"seed": 0}, "eval", with_cost=True, progress=False, max_failed_fraction=0.5)
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["llm_judge"] == pytest.approx(4 / 6, abs=1e-4) and res["overall"]["n"] == 6
    assert res["judge_failures"]["llm_judge"]["failed"] == 2
    assert res["judge_failures"]["llm_judge"]["labelled_only"] == {"n": 4, "llm_judge": 1.0}
    assert res["health"]["judge_failed_labels"] == 2 and res["health"]["judged_answers"] == 6
    assert res["health"]["status"] == "ok"  # 2/6 under max_failed_fraction=0.5
    preds = {p["id"]: p for p in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())}
    assert preds["q1"]["llm_judge"] == 0.0 and preds["q1"]["llm_judge_judge_failed"] is True
    assert "llm_judge_judge_failed" not in preds["q0"]
    out2 = tmp_path / "strict"
    finalize(out2, recs, [m], {"seed": 0}, "eval", with_cost=True, progress=False, max_failed_fraction=0.1)
    h = json.loads((out2 / "results.json").read_text())["health"]
    assert h["status"] == "failed" and "got no label" in h["reason"]
