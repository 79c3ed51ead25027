"""Results by evidence age (compress once, query many): the bucketing on hand cases, results.json /
results.md on the shipped LoCoMo sample with a scripted system, ``score`` of the file, and
``report decay=RUN1,RUN2`` side by side."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbench.config.compose import option_config
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.data.locomo import load_locomo_file
from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.memory.baselines import FullContext
from ctxbench.metrics.evidence_age import (age_bucket, by_evidence_age, evidence_age, history_last_session,
                                           record_bucket)
from ctxbench.report.decay import decay_report
from ctxbench.report.runs import ReportError
from tests.scripted_llm import ScriptedLLM

SAMPLE = Path(__file__).resolve().parents[1] / "ctxbench" / "samples" / "locomo_sample.json"


@pytest.mark.parametrize("evidence,last,age", [
    (["D3:1"], 3, 0), (["D2:2"], 3, 1), (["D1:3"], 3, 2),
    (["D2:3", "D2:5"], 3, 1),
    (["D1:3", "D1:4; D3:4"], 3, 0),  # a malformed id still names sessions 1 and 3: the most recent counts
    (["D"], 3, None), ([], 3, None),  # no session named
    (["D9:1"], 3, None),  # beyond the history (a cut conversation): not a known session
    (["D1:1"], None, None),  # the history's last session unknown
    (["D1:1"], 12, 11),
])
def test_evidence_age_on_hand_cases(evidence, last, age):
    assert evidence_age(evidence, last) == age


@pytest.mark.parametrize("age,bucket", [(0, "0"), (1, "1"), (2, "2-3"), (3, "2-3"), (4, "4-7"), (7, "4-7"),
                                        (8, "8+"), (30, "8+"), (None, "unknown")])
def test_buckets(age, bucket):
    assert age_bucket(age) == bucket


def test_last_session_comes_from_the_turn_ids():
    turns = lambda s: [Turn("a", "x", id=f"D{s}:1"), Turn("b", "y", id=f"D{s}:2")]  # noqa: E731
    sessions = [Session("session_1", turns(1)), Session("session_4", turns(4))]
    assert history_last_session(History("h", sessions=sessions)) == 4
    assert history_last_session(History("doc", text="a document")) is None
    assert history_last_session(History("h", sessions=[Session("s", [Turn("a", "x")])])) is None


def test_groups_are_scored_like_categories():
    recs = [{"id": f"q{i}", "evidence": ev, "history_last_session": 5, "f1": f1}
            for i, (ev, f1) in enumerate([(["D5:1"], 1.0), (["D5:2"], 0.0), (["D4:1"], 1.0), (["D1:1"], 0.5),
                                          (["D"], 0.0)])]
    out = by_evidence_age(recs, ["f1"])
    assert list(out) == ["0", "1", "4-7", "unknown"]  # only the buckets some question falls in, in order
    assert out["0"]["n"] == 2 and out["0"]["f1"] == 0.5 and out["0"]["f1_stderr"] is not None
    assert out["4-7"] == {"ages": [4, 7], "n": 1, "f1": 0.5, "f1_stderr": None}  # one question: no spread
    assert out["unknown"]["ages"] is None
    assert by_evidence_age([{"id": "q", "f1": 1.0}], ["f1"]) is None  # no evidence at all: no block
    assert record_bucket({"evidence": ["D1:1"]}) == "unknown"  # a record without history_last_session


def _run(tmp_path: Path, name: str, reply) -> Path:
    samples = load_locomo_file(SAMPLE)
    llm = ScriptedLLM(reply)
    system = FullContext(option_config("memory", {"name": "full_context"}), llm=llm)
    out = tmp_path / name
    evaluate_samples(system, samples, out, llm=llm, metrics=["f1"], extra={"system": name, "dataset": "locomo_sample"})
    return out


def test_eval_writes_by_evidence_age_and_score_keeps_it(tmp_path, cli):
    out = _run(tmp_path, "a", "yes")
    res = json.loads((out / "results.json").read_text())
    recs = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    by_conv = {r["history_id"]: r["history_last_session"] for r in recs if r.get("evidence")}
    assert sorted(by_conv.values()) == [2, 3]  # the sample's conversations: 3 and 2 sessions
    ages = res["by_evidence_age"]
    # 3 sessions: D3 x3 (a D1/D3 pair among them) -> 0, D2 x4 -> 1, D1 x3 -> 2-3, a malformed "D" -> unknown;
    # 2 sessions: D2 x2 -> 0, D1 x3 -> 1
    per_conv = {k: v["n"] for k, v in ages.items()}
    assert per_conv == {"0": 5, "1": 7, "2-3": 3, "unknown": 1} and sum(per_conv.values()) == res["overall"]["n"]
    assert all("f1" in row and "f1_stderr" in row for row in ages.values())
    md = (out / "results.md").read_text()
    assert "## By evidence age" in md and "| 2-3 | 3 |" in md
    # score predictions=FILE: the lines carry evidence and history_last_session, so it groups them the same way
    cli("score", f"predictions={out / 'predictions.jsonl'}", "metrics=[f1]", f"hydra.run.dir={tmp_path / 'scored'}")
    scored = json.loads((tmp_path / "scored" / "results.json").read_text())
    assert {k: v["n"] for k, v in scored["by_evidence_age"].items()} == per_conv
    assert scored["by_evidence_age"]["1"]["f1"] == ages["1"]["f1"]


def test_report_decay_puts_runs_side_by_side(tmp_path, cli):
    a, b = _run(tmp_path, "a", "yes"), _run(tmp_path, "b", "no")
    result = decay_report(f"{a},{b}", str(tmp_path / "decay.md"))
    md = result["markdown"]
    header = next(ln for ln in md.splitlines() if ln.startswith("| run"))
    assert header.split("|")[2:7] == [" 0 ", " 1 ", " 2-3 ", " unknown ", " all "]  # buckets with questions only
    assert md.count("\n| a |") == 1 and md.count("\n| b |") == 1  # one metric (f1): one row per run
    rec = {r["run"]: r for r in result["records"]}
    res_a = json.loads((a / "results.json").read_text())
    assert rec["a"]["buckets"]["1"]["f1"] == res_a["by_evidence_age"]["1"]["f1"]
    assert json.loads((tmp_path / "decay.json").read_text())[0]["run"] == "a"
    proc = cli("report", f"decay={a},{b}", f"out={tmp_path / 'd2.md'}")
    assert proc.returncode == 0 and "## f1" in proc.stdout and (tmp_path / "d2.md").exists()


def test_report_decay_refuses_a_run_without_evidence_ages(tmp_path):
    out = _run(tmp_path, "a", "yes")
    res = json.loads((out / "results.json").read_text())
    del res["by_evidence_age"]
    (out / "results.json").write_text(json.dumps(res))
    with pytest.raises(ReportError, match=r"a: results.json has no by_evidence_age"):
        decay_report(str(out), None)


def test_longmemeval_age_from_session_order():
    """LongMemEval: no dia-id numbering; the age is the sessions after the latest evidence session."""
    from ctxbench.evaluation.run import question_record
    from ctxbench.metrics.evidence_age import by_evidence_age, session_evidence_age

    order = ["s_a", "answer_1", "s_b", "answer_2", "s_c"]
    assert session_evidence_age(order, ["answer_1"]) == 3
    assert session_evidence_age(order, ["answer_1", "answer_2"]) == 1
    assert session_evidence_age(order, ["elsewhere"]) is None
    q = Question(id="q1", question="?", answer="x", category="multi-session", category_name="multi-session",
                 evidence=["answer_2_1"], meta={"evidence_sessions": ["answer_2"]})
    rec = question_record(q, "q1", None, order)
    assert rec["evidence_age"] == 1
    rec["f1"] = 1.0
    assert list(by_evidence_age([rec], ["f1"])) == ["1"]
