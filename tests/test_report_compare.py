"""``report compare=RUN_A,RUN_B`` (paired bootstrap of B − A) and ``report reruns=RUN1,RUN2,...`` (the
variance of the system beside the judge's): ctxbench/report/compare.py, ctxbench/report/reruns.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxbench.__main__ import quote_list_value
from ctxbench.data.errata import Correction, Errata
from ctxbench.evaluation.finalize import finalize
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.stats import paired_bootstrap
from ctxbench.report.compare import compare_runs, load_scores
from ctxbench.report.runs import ReportError

from conftest import run_cli
from test_stats import ExactJudge

N = 120


def questions(n: int = N) -> list[dict]:
    return [{"id": f"q{i:03d}", "question": f"Q{i}", "answer": f"answer {i}", "category": 1 + i % 4} for i in range(n)]


def run(tmp: Path, name: str, right: set[int], n: int = N, failed: set[int] = frozenset(), judge_runs: int = 1,
        errata=None) -> Path:
    """A finished run folder in which the questions in ``right`` were answered with their gold answer."""
    recs = []
    for i, q in enumerate(questions(n)):
        rec = dict(q, prediction=q["answer"] if i in right else "no idea")
        if i in failed:
            rec.update(prediction="", failed=True, error="down")
        recs.append(rec)
    out = tmp / name
    finalize(out, recs, build_metrics(["f1", "bleu1"]) + [ExactJudge(runs=judge_runs)], {"seed": 0}, "score",
             with_cost=False, progress=False, errata=errata)
    return out


BASE = set(range(0, N, 2))              # A: right on every other question
BETTER = BASE | set(range(1, N, 4))     # B: right on 30 more


def test_compare_detects_a_planted_difference(tmp_path):
    a, b = run(tmp_path, "a", BASE), run(tmp_path, "b", BETTER)
    md = tmp_path / "cmp.md"
    p = run_cli("report", f"compare={a},{b}", f"out={md}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(md.with_suffix(".json").read_text())
    assert res["paired"] == N and res["failed"] == {"a": 0, "b": 0, "either": 0}
    assert set(res["metrics"]) == {"f1", "bleu1", "llm_judge"}  # every metric and every judge both runs have
    j = res["metrics"]["llm_judge"]["overall"]
    assert j["delta"] == pytest.approx(30 / N) and j["a"] == 0.5 and j["p"] < 0.001 and j["ci95"][0] > 0
    assert list(res["metrics"]["f1"]) == ["overall", "multi-hop", "temporal", "open-domain", "single-hop"]
    # B gained on every question with i % 4 == 1, the temporal ones (category 2); the others are unchanged
    assert res["metrics"]["llm_judge"]["temporal"]["delta"] == 1.0
    assert res["metrics"]["llm_judge"]["temporal"]["p"] is None  # +1 on every one: no variance, no star
    for cat in ("multi-hop", "open-domain", "single-hop"):  # unchanged: no variance, so Δ only (no p, no star)
        assert res["metrics"]["llm_judge"][cat]["delta"] == 0.0 and res["metrics"]["llm_judge"][cat]["p"] is None
    text = md.read_text()
    assert "## llm_judge" in text and "+0.2500 *" in text and "+1.0000 *" not in text and "no variance" in text
    # the same command, the same numbers (seeded)
    assert run_cli("report", f"compare={a},{b}", f"out={md}").returncode == 0
    assert json.loads(md.with_suffix(".json").read_text()) == res


def test_identical_runs_differ_by_nothing(tmp_path):
    a, b = run(tmp_path, "a", BASE), run(tmp_path, "b", BASE)
    res = compare_runs(load_scores(a), load_scores(b))
    for node in res["metrics"].values():
        for r in node.values():
            assert r["delta"] == 0.0 and r["p"] is None and r["ci95"] is None and r["note"]


def test_runs_on_different_questions_are_refused_in_one_line(tmp_path):
    a, b = run(tmp_path, "a", BASE), run(tmp_path, "b", BASE, n=N - 1)
    p = run_cli("report", f"compare={a},{b}", f"out={tmp_path / 'c.md'}")
    assert p.returncode == 2
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "different questions" in err[0] and str(a) in err[0] and "1 only in the first" in err[0]
    assert not (tmp_path / "c.json").exists()


def test_compare_pairs_every_question_with_failed_as_wrong(tmp_path):
    a = run(tmp_path, "a", BASE, failed={1, 3})
    b = run(tmp_path, "b", BETTER, failed={3, 5})
    res = compare_runs(load_scores(a), load_scores(b))
    assert res["paired"] == N and res["failed"] == {"a": 2, "b": 2, "either": 3}
    want = paired_bootstrap([float(i in BASE and i not in {1, 3}) for i in range(N)],
                            [float(i in BETTER and i not in {3, 5}) for i in range(N)])
    assert res["metrics"]["llm_judge"]["overall"] == want
    # the answered-only view beside it, over the questions both answered
    keep = [i for i in range(N) if i not in {1, 3, 5}]
    only = res["answered_only"]
    assert only["paired"] == N - 3
    assert only["metrics"]["llm_judge"]["overall"] == paired_bootstrap([float(i in BASE) for i in keep],
                                                                     [float(i in BETTER) for i in keep])


def test_compare_delta_is_the_headline_delta_even_when_failures_reverse_it(tmp_path):
    """The review's case: A answers all 10 (7 right); B answers the 5 easy ones right and fails the other 5.
    Headline B − A = 0.5 − 0.7 = −0.20; pairing only the answered questions said +0.20."""
    a = run(tmp_path, "a", {0, 1, 2, 3, 5, 6, 7}, n=10)
    b = run(tmp_path, "b", {0, 1, 2, 3, 4}, n=10, failed={5, 6, 7, 8, 9})
    res = compare_runs(load_scores(a), load_scores(b))
    head_a = json.loads((a / "results.json").read_text())["overall"]["llm_judge"]
    head_b = json.loads((b / "results.json").read_text())["overall"]["llm_judge"]
    j = res["metrics"]["llm_judge"]["overall"]
    assert (head_a, head_b) == (0.7, 0.5) and j["delta"] == pytest.approx(head_b - head_a) == -0.2
    assert res["answered_only"]["metrics"]["llm_judge"]["overall"]["delta"] == pytest.approx(0.2)
    md = tmp_path / "c.md"
    assert run_cli("report", f"compare={a},{b}", f"out={md}").returncode == 0
    text = md.read_text()
    assert "# Answered only: the 5 questions both runs answered" in text and "-0.2000" in text


def test_compare_under_the_corrected_gold(tmp_path):
    fix = Errata(source="e.json", rows=1, corrections={"q000": Correction("something else", "answer 0", "HALLUCINATION", 0)},
                 audited={"multi-hop": 30}, marked={"multi-hop": 1}, audited_ids={"multi-hop": 1})
    a, b = run(tmp_path, "a", BASE, errata=fix), run(tmp_path, "b", BASE - {0}, errata=fix)
    res = compare_runs(load_scores(a), load_scores(b))
    assert res["metrics"]["llm_judge"]["overall"]["delta"] == pytest.approx(-1 / N, abs=1e-4)  # B misses q000 ...
    assert res["metrics"]["llm_judge@corrected"]["overall"]["delta"] == 0.0  # ... whose gold was wrong


def test_reruns_report_the_system_apart_from_the_judge(tmp_path):
    rng = np.random.default_rng(0)
    sets = [set(np.flatnonzero(rng.random(N) < 0.5).tolist()) for _ in range(3)]
    runs = [run(tmp_path, f"r{k}", s, judge_runs=2) for k, s in enumerate(sets)]
    md = tmp_path / "reruns.md"
    p = run_cli("report", "reruns=" + ",".join(map(str, runs)), f"out={md}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(md.with_suffix(".json").read_text())
    means = [len(s) / N for s in sets]
    e2e = res["metrics"]["llm_judge"]["end_to_end"]["overall"]
    assert e2e["std"] == round(float(np.std(means, ddof=1)), 4) and e2e["runs"] == [round(m, 4) for m in means]
    assert res["metrics"]["llm_judge"]["judge"]["mean_std"] == 0.0  # this judge gives the same label every run
    assert res["metrics"]["llm_judge"]["judge"]["judge_runs"] == [2, 2, 2]
    assert "judge" not in res["metrics"]["f1"]
    assert set(res["metrics"]["f1"]["end_to_end"]["by_category"]) == {"multi-hop", "temporal", "open-domain", "single-hop"}
    assert "std over runs (system)" in md.read_text()
    other = run(tmp_path, "other", BASE, n=N - 2)
    p = run_cli("report", f"reruns={runs[0]},{other}", f"out={md}")
    assert p.returncode == 2 and "different questions" in p.stderr


def test_list_values_reach_the_report_as_one_string():
    assert quote_list_value("compare=a/b,c/d") == "compare='a/b,c/d'"
    assert quote_list_value("reruns=[x,y]") == "reruns=[x,y]" and quote_list_value("out=a,b") == "out=a,b"
    assert quote_list_value("compare=it's,b") == "compare='it\\'s,b'"


class ModelJudge(ExactJudge):
    """ExactJudge that says which model judged (as LLMJudge.model() does)."""

    def __init__(self, model: str):
        super().__init__()
        self._model = model

    def model(self) -> str:
        return self._model

    def settings(self) -> dict:
        return {"runs": 1, "model": self._model}


def judged_run(tmp: Path, name: str, right: set[int], model: str) -> Path:
    recs = [dict(q, prediction=q["answer"] if i in right else "no idea") for i, q in enumerate(questions())]
    out = tmp / name
    finalize(out, recs, build_metrics(["f1"]) + [ModelJudge(model)], {"seed": 0}, "score", with_cost=False,
             progress=False)
    return out


def test_runs_judged_by_different_models_are_refused_or_marked(tmp_path):
    """The judge model defaults to the evaluated system's llm=: two runs with other llm= are judged by other
    models, and a J difference would mix the systems with the judges."""
    a = judged_run(tmp_path, "a", BASE, "gpt-4o-mini")
    b = judged_run(tmp_path, "b", BETTER, "smollm2-135m")
    first = json.loads((a / "predictions.jsonl").read_text().splitlines()[0])
    assert first["judged_by"] == {"llm_judge": "gpt-4o-mini"}  # every row says who judged it
    p = run_cli("report", f"compare={a},{b}", f"out={tmp_path / 'c.md'}")
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(err) == 1 and "judged by different models" in err[0]
    assert "gpt-4o-mini vs smollm2-135m" in err[0]
    p = run_cli("report", f"compare={a},{b}", "judge_mismatch=mark", f"out={tmp_path / 'c.md'}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "c.json").read_text())
    assert res["judge_models"]["differ"] == {"llm_judge": {"a": "gpt-4o-mini", "b": "smollm2-135m"}}
    assert "**Judged by different models**" in (tmp_path / "c.md").read_text()
    same = judged_run(tmp_path, "c", BETTER, "gpt-4o-mini")
    assert compare_runs(load_scores(a), load_scores(same))["judge_models"]["differ"] == {}
