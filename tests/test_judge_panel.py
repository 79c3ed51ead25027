"""``judge.panel=[...]``: every answer judged under every judge, ``llm_judge`` = the first, ``llm_judge_<name>``
per judge, J per judge and the spread in results.md; ``score predictions=RUN_DIR judge.panel=[...]``
re-judges a finished run from its predictions.jsonl without building any system; ``judge.calibration=``
puts each judge's leniency into results.json and marks a lenient judge's J.

The scripted judge model answers by which prompt it got (:func:`panel_reply`): mem0's prompt accepts
everything, zep's accepts an answer that contains the gold, strict's only the gold itself, so the three
J values are known without the code under test."""
from __future__ import annotations

import json
import sqlite3

import pytest
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.evaluation.finalize import finalize
from ctxbench.llm.cache import CachedLLM
from ctxbench.metrics.aggregate import aggregate, score_records
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.judges.panel import panel_metrics
from ctxbench.metrics.judges.panel import panel_names

from scripted_llm import ScriptedLLM as _Scripted
from tests.conftest import run_cli


class ScriptedLLM(_Scripted):
    """The scripted chat model, taking the sampling seed that judge.runs > 1 sends (and ignoring it)."""

    def chat(self, messages, *, seed=None, **kw):
        return super().chat(messages, **kw)


def gold_and_answer(content: str) -> tuple[str, str]:
    gold = content.rsplit("Gold answer: ", 1)[1].split("\n")[0].strip()
    answer = content.rsplit("Generated answer: ", 1)[1].split("\n")[0].strip()
    return gold, answer


def panel_reply(messages, **kw) -> str:
    c = messages[-1]["content"]
    if "williolw23" in c:  # zep: the gold appears in the answer
        gold, answer = gold_and_answer(c)
        return json.dumps({"is_correct": "CORRECT" if gold.lower() in answer.lower() else "WRONG", "reasoning": ""})
    if "commits to the fact" in c:  # strict: exactly the gold
        gold, answer = gold_and_answer(c)
        return json.dumps({"label": "CORRECT" if gold.lower() == answer.lower() else "WRONG"})
    return json.dumps({"label": "CORRECT"})  # mem0: generous to a fault


# (prediction, gold): mem0 accepts 4/4, zep 3/4 (gold inside), strict 2/4 (exact)
ROWS = [("Paris", "Paris"), ("pottery", "pottery"), ("I think Paris, maybe Rome", "Paris"), ("Lisbon", "Madrid")]


def records() -> list[dict]:
    return [{"id": f"q{i}", "question": f"Where did person {i} go?", "prediction": p, "answer": g,
             "category": 4} for i, (p, g) in enumerate(ROWS)]


def panel(names, **extra):
    return OmegaConf.create({"panel": names, "runs": 1, "temperature": 0.0, "seed": 0, **extra})


def test_the_panel_gives_each_judge_its_own_j_and_llm_judge_is_the_first():
    llm = ScriptedLLM(panel_reply)
    ms = build_metrics(["f1"], llm=llm, judge=panel(["mem0", "zep", "strict"]))
    names = [m.name for m in ms]
    assert names == ["f1", "llm_judge", "llm_judge_mem0", "llm_judge_zep", "llm_judge_strict"]
    agg = aggregate(score_records(records(), ms), names)["overall"]
    assert (agg["llm_judge"], agg["llm_judge_mem0"], agg["llm_judge_zep"], agg["llm_judge_strict"]) == \
        (1.0, 1.0, 0.75, 0.5)
    assert len(llm.calls) == 4 * 3  # llm_judge and llm_judge_mem0 share one call per answer
    assert [m.version for m in ms[1:]] == ["mem0-judge-2", "mem0-judge-2", "zep-judge-1", "strict-judge-1"]


def test_a_panel_of_one_is_todays_llm_judge_and_another_first_judge_takes_llm_judge():
    llm = ScriptedLLM(panel_reply)
    assert [m.name for m in build_metrics(["llm_judge"], llm=llm, judge=panel(["mem0"]))] == ["llm_judge"]
    assert [m.name for m in build_metrics(["f1"], llm=llm, judge=panel(["mem0"]))] == ["f1"]  # no judging asked
    (m,) = build_metrics(["llm_judge"], llm=llm, judge=panel(["strict"]))
    assert m.judge == "strict" and m.version == "strict-judge-1"
    assert aggregate(score_records(records(), [m]), ["llm_judge"])["overall"]["llm_judge"] == 0.5


def test_runs_give_every_panel_metric_runs_and_std():
    llm = ScriptedLLM(panel_reply)
    ms = build_metrics(["llm_judge"], llm=llm, judge=panel(["mem0", "strict"], runs=2))
    scored = score_records(records(), ms)
    assert scored[0]["llm_judge_strict_runs"] == [1.0, 1.0] and scored[3]["llm_judge_strict_runs"] == [0.0, 0.0]
    agg = aggregate(scored, [m.name for m in ms])
    assert agg["overall"]["llm_judge_strict_std"] == 0.0 and "llm_judge_strict" in agg["metric_runs"]


def test_each_judge_is_its_own_cache_key(tmp_path):
    llm = CachedLLM(ScriptedLLM(panel_reply), tmp_path / "c.sqlite", backend="scripted")
    score_records(records(), build_metrics(["llm_judge"], llm=llm, judge=panel(["mem0", "zep", "strict"])))
    with sqlite3.connect(tmp_path / "c.sqlite") as c:
        assert c.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 12
    inner = ScriptedLLM(panel_reply)  # a rerun: every call a cache hit
    again = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
    score_records(records(), build_metrics(["llm_judge"], llm=again, judge=panel(["mem0", "zep", "strict"])))
    assert inner.calls == []


@pytest.mark.parametrize("bad,msg", [([], "name at least one judge"), (["mem0", "mem0"], "named twice"),
                                     (["mem0", "zap"], "Did you mean 'zep'")])
def test_a_bad_panel_is_one_line(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        panel_names(OmegaConf.create({"panel": bad}))


def test_panel_metrics_builds_from_a_config_and_an_llm():
    cfg = OmegaConf.create({"judge": {"panel": ["zep", "strict"]}, "judge_llm": None, "llm": {"name": "hf"}})
    llm = ScriptedLLM(panel_reply)
    ms = panel_metrics(cfg, llm)  # an importer's records get the panel from the same two arguments
    assert [m.name for m in ms] == ["llm_judge", "llm_judge_zep", "llm_judge_strict"] and ms[0].llm is llm


# ---- re-judging a finished run ---------------------------------------------------------------------

def finished_run(tmp_path):
    """A run folder as `eval` leaves it: predictions.jsonl with f1 and an old llm_judge (runs=3), results."""
    out = tmp_path / "run"
    out.mkdir()
    ms = build_metrics(["f1", "llm_judge"], llm=ScriptedLLM('{"label": "WRONG"}'), judge=panel(["mem0"], runs=3))
    finalize(out, records(), ms, OmegaConf.create({"seed": 0, "judge": {"runs": 3}}), "eval", with_cost=False,
             progress=False)
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert rows[0]["llm_judge"] == 0.0 and rows[0]["llm_judge_runs"] == [0.0, 0.0, 0.0]
    return out


def no_system(*a, **k):
    raise AssertionError("re-judging must not build a system")


def test_score_rejudges_a_finished_run_without_building_the_system(tmp_path, monkeypatch):
    run = finished_run(tmp_path)
    scripted = ScriptedLLM(panel_reply)
    monkeypatch.setattr("ctxbench.metrics.judges.panel.judge_llm",
                        lambda cfg, llm=None, force=False: scripted)
    for name in ("build_history_systems", "build_system"):
        monkeypatch.setattr(f"ctxbench.evaluation.evaluator.{name}", no_system)
    out = tmp_path / "rejudged"
    p = run_cli("score", f"predictions={run}", "judge.panel=[mem0,zep,strict]", "metrics=[f1]",
                f"hydra.run.dir={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    ov = res["overall"]
    assert (ov["llm_judge"], ov["llm_judge_zep"], ov["llm_judge_strict"]) == (1.0, 0.75, 0.5)
    assert "llm_judge_std" not in ov  # the old three runs are gone with the old labels
    assert res["judges"]["zep"]["prompt_version"] == "zep-judge-1" and res["judges"]["zep"]["model"] == "scripted"
    assert res["judges"]["mem0"]["metrics"] == ["llm_judge", "llm_judge_mem0"]
    assert res["judges"]["strict"]["runs"] == 1 and res["judges"]["strict"]["lenient"] is None
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert "llm_judge_runs" not in rows[0] and rows[2]["llm_judge_zep"] == 1.0 and rows[2]["llm_judge_strict"] == 0.0
    md = (out / "results.md").read_text()
    assert "## Judges" in md and "Spread of J across the 3 judges (max − min): 0.5000" in md
    assert len(scripted.calls) == 12


def calibration_file(tmp_path, fa: dict, model: str = "scripted") -> str:
    judges = {n: {"prompt_version": v, "model": model, "false_accept": a, "false_reject": 0.1,
                  "false_accept_ci95": [0, 1], "false_reject_ci95": [0, 1]}
              for n, (v, a) in fa.items()}
    path = tmp_path / "judges.json"
    path.write_text(json.dumps({"calibration_set": {"hash": "h"}, "lenient_above": 0.2, "judges": judges}))
    return str(path)


def test_a_calibration_marks_the_lenient_judge_in_results(tmp_path, monkeypatch):
    run = finished_run(tmp_path)
    monkeypatch.setattr("ctxbench.metrics.judges.panel.judge_llm",
                        lambda cfg, llm=None, force=False: ScriptedLLM(panel_reply))
    cal = calibration_file(tmp_path, {"mem0": ("mem0-judge-2", 0.6), "zep": ("zep-judge-1", 0.05),
                                      "strict": ("strict-judge-0", 0.0)})
    out = tmp_path / "cal"
    p = run_cli("score", f"predictions={run}", "judge.panel=[mem0,zep,strict]", "metrics=[f1]",
                f"judge.calibration={cal}", f"hydra.run.dir={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    judges = json.loads((out / "results.json").read_text())["judges"]
    assert judges["mem0"]["lenient"] is True and judges["mem0"]["false_accept"] == 0.6
    assert judges["zep"]["lenient"] is False and judges["zep"]["calibration"]["matched"] is True
    assert judges["strict"]["false_accept"] is None and judges["strict"]["calibration"]["matched"] is False
    assert "prompt_version" in judges["strict"]["calibration"]["why"]  # measured on another prompt version
    md = (out / "results.md").read_text()
    assert "| llm_judge (lenient) | llm_judge_mem0 (lenient) | llm_judge_zep | llm_judge_strict |" in md
    assert "**lenient**" in md


def test_a_missing_calibration_fails_before_judging(tmp_path, monkeypatch):
    run = finished_run(tmp_path)
    scripted = ScriptedLLM(panel_reply)
    monkeypatch.setattr("ctxbench.metrics.judges.panel.judge_llm", lambda cfg, llm=None, force=False: scripted)
    p = run_cli("score", f"predictions={run}", "judge.panel=[mem0,zep]", f"judge.calibration={tmp_path}/nope.json",
                f"hydra.run.dir={tmp_path / 'x'}")
    assert p.returncode == 2 and "judge.calibration" in p.stderr and "nope.json" in p.stderr
    assert scripted.calls == []


def test_the_board_marks_a_lenient_judges_j():
    from ctxbench.report.board import render_board

    row = {"row": "a", "label": "A", "paradigm": "memory", "run": "x", "n": 4, "f1": 0.5, "llm_judge": 0.9,
           "llm_judge_stderr": 0.1, "llm_judge_lenient": True}
    assert "0.900 ± 0.100 (lenient)" in render_board({"name": "b"}, [row], None)
    assert "(lenient)" not in render_board({"name": "b"}, [{**row, "llm_judge_lenient": False}], None)
