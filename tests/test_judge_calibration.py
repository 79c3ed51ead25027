"""The judge calibration set (built from gold, no LLM) and ``report judges``: the same seed gives the same
items; every kind is present; paraphrases pass an exact-match oracle written here and the wrong answers do
not; a judge that accepts everything is flagged lenient and an oracle judge is not; Wilson intervals; the
CLI writes judges.json / judges.md / judges_items.jsonl in the run folder."""
from __future__ import annotations

import calendar
import json
import random
import re

import pytest
from omegaconf import OmegaConf

from ctxbench.config.schemas import load_option
from ctxbench.core.registry import build
from ctxbench.metrics.aggregate import score_records
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.judges import gold_dates
from ctxbench.metrics.judges.calibration_set import KINDS, build_calibration_set, item_records, set_hash
from ctxbench.metrics.judges.leniency import judge_rates, leniency_report, wilson

from scripted_llm import ScriptedLLM
from tests.conftest import run_cli


def sample_set():
    return build("dataset", load_option("dataset", "locomo_sample"))


# ---- an exact-match oracle of its own (not the code under test) ---------------------------------------
MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
M = "(" + "|".join(MONTHS) + ")"


def norm(text: str) -> str:
    t = text.lower()
    t = re.sub(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s*{M},?\s*(\d{{4}})", lambda m: f"{m[3]}-{MONTHS[m[2]]:02d}-{int(m[1]):02d}", t)
    t = re.sub(rf"\b{M}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s*(\d{{4}})", lambda m: f"{m[3]}-{MONTHS[m[1]]:02d}-{int(m[2]):02d}", t)
    t = re.sub(rf"\b{M},?\s+(?:of\s+)?(\d{{4}})", lambda m: f"{m[2]}-{MONTHS[m[1]]:02d}", t)
    t = re.sub(r"\b(a|an|the)\b", " ", t)
    t = re.sub(r"[^\w\s-]", " ", t)
    return " ".join(t.split())


def oracle(gold: str, answer: str) -> bool:
    hedged = re.search(r"not sure|maybe|could be|possibly|might", answer.lower())
    return not hedged and f" {norm(gold)} " in f" {norm(answer)} "


def test_the_same_seed_gives_the_same_items_and_another_seed_others():
    samples = sample_set()
    a, b = build_calibration_set(samples, 8, seed=3), build_calibration_set(samples, 8, seed=3)
    assert a == b and set_hash(a) == set_hash(b)
    c = build_calibration_set(samples, 8, seed=4)
    assert set_hash(c) != set_hash(a)
    assert build_calibration_set(sample_set(), 8, seed=3) == a  # a fresh load, the same items


def test_every_kind_is_present_and_labelled():
    items = build_calibration_set(sample_set(), 20, seed=0)
    assert {it["kind"] for it in items} == set(KINDS)
    assert all(it["expect"] == ("accept" if it["kind"] == "paraphrase" else "reject") for it in items)
    assert all(it["category_name"] != "adversarial" for it in items)
    assert len({it["id"] for it in items}) == len(items)
    qids = {it["question_id"] for it in items}
    assert len(qids) == 13  # the sample's answerable questions (categories 1-4), all of them when asking for 20


def test_paraphrases_pass_an_exact_match_oracle_and_wrong_answers_do_not():
    items = build_calibration_set(sample_set(), 20, seed=0)
    for it in items:
        assert it["answer"] != it["gold"]
        if it["kind"] == "paraphrase":
            assert oracle(it["gold"], it["answer"]), it
        else:
            assert not oracle(it["gold"], it["answer"]), it
    dated = [it for it in items if it["kind"] == "wrong_date"]
    assert dated and all(norm(it["answer"]) != norm(it["gold"]) for it in dated)


def test_a_question_gets_its_own_items_whatever_else_is_sampled():
    samples = sample_set()
    small = {it["id"]: it for it in build_calibration_set(samples, 4, seed=0)}
    large = {it["id"]: it for it in build_calibration_set(samples, 13, seed=0)}
    assert small and all(large[k] == v for k, v in small.items())


@pytest.mark.parametrize("gold,layout,other", [("7 May 2023", "dmy", "May 7, 2023"),
                                               ("The week before 9 June, 2023", "dmy", "June 9, 2023"),
                                               ("October 13th, 2023", "mdy", "13 October, 2023"),
                                               ("June 2023", "my", "June of 2023"), ("in 2022", "y", "the year 2022")])
def test_gold_dates_are_found_shifted_and_rewritten(gold, layout, other):
    d = gold_dates.find_date(gold)
    assert d.layout == layout and other in gold_dates.reformat(gold, d)
    for seed in range(20):
        moved = gold_dates.shift(d, random.Random(seed))
        assert moved.layout == layout and gold_dates.write(moved) != gold_dates.write(d)
    assert gold_dates.find_date("31 February 2023 or so") .layout == "my"  # not a date: the month-year is


def test_wilson_intervals():
    assert wilson(0, 10) == [0.0, 0.2775]
    assert wilson(5, 10) == [0.2366, 0.7634]
    assert wilson(10, 10) == [0.7225, 1.0]
    assert wilson(0, 0) is None


# ---- leniency -----------------------------------------------------------------------------------------

def accept_all(messages, **kw):
    return '{"label": "CORRECT"}'


def oracle_judge(messages, **kw):
    c = messages[-1]["content"]
    gold = c.rsplit("Gold answer: ", 1)[1].split("\n")[0]
    answer = c.rsplit("Generated answer: ", 1)[1].split("\n")[0]
    return json.dumps({"label": "CORRECT" if oracle(gold, answer) else "WRONG"})


def measure(reply, judge="mem0"):
    items = build_calibration_set(sample_set(), 20, seed=0)
    ms = build_metrics(["llm_judge"], llm=ScriptedLLM(reply), judge=OmegaConf.create({"panel": [judge]}))
    scored = score_records(item_records(items), ms)
    return items, leniency_report(items, scored, ms, 0.2, {"items": len(items)})["judges"][judge]


def test_a_judge_that_accepts_everything_is_flagged_lenient():
    items, j = measure(accept_all)
    n_reject = sum(it["expect"] == "reject" for it in items)
    assert j["false_accept"] == 1.0 and j["false_reject"] == 0.0 and j["lenient"] is True
    assert j["rates"]["false_accept"]["n"] == n_reject and j["false_accept_ci95"] == wilson(n_reject, n_reject)
    assert set(j["rates"]["false_accept_by_kind"]) == {"wrong_date", "wrong_entity", "vague", "hedge"}
    assert all(r["rate"] == 1.0 for r in j["rates"]["false_accept_by_kind"].values())
    assert j["prompt_version"] == "mem0-judge-2" and j["model"] == "scripted" and j["runs"] == 1


def test_an_exact_match_judge_is_not_flagged():
    _, j = measure(oracle_judge, judge="strict")
    assert j["false_accept"] == 0.0 and j["false_reject"] == 0.0 and j["lenient"] is False


def test_unlabelled_items_are_counted_apart():
    items = [{"id": "a", "kind": "vague", "expect": "reject"}, {"id": "b", "kind": "vague", "expect": "reject"},
             {"id": "c", "kind": "paraphrase", "expect": "accept"}]
    r = judge_rates(items, [{"id": "a", "m": 1.0}, {"id": "b", "m": None}, {"id": "c", "m": 0.0}], "m")
    assert r["false_accept"] == {"rate": 1.0, "n": 1, "ci95": wilson(1, 1), "unlabelled": 1}
    assert r["false_reject"]["rate"] == 1.0 and r["false_reject"]["n"] == 1


# ---- the CLI ------------------------------------------------------------------------------------------

def test_report_judges_cli_writes_judges_json_and_md(tmp_path, monkeypatch):
    def reply(messages, **kw):  # mem0's prompt: accept all; strict's: the oracle
        return oracle_judge(messages) if "commits to the fact" in messages[-1]["content"] else accept_all(messages)

    scripted = ScriptedLLM(reply)
    monkeypatch.setattr("ctxbench.metrics.judges.panel.judge_llm", lambda cfg, llm=None, force=False: scripted)
    out = tmp_path / "rep"
    p = run_cli("report", "judges", "judge.panel=[mem0,strict]", "dataset=locomo_sample",
                "calibration_set.questions=6", "calibration_set.seed=1", f"hydra.run.dir={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((out / "judges.json").read_text())
    assert rep["judges"]["mem0"]["lenient"] is True and rep["judges"]["strict"]["lenient"] is False
    assert rep["lenient_above"] == 0.2 and rep["calibration_set"]["questions"] == 6
    assert rep["calibration_set"]["seed"] == 1 and rep["calibration_set"]["dataset"] == "locomo_sample"
    items = [json.loads(x) for x in (out / "judges_items.jsonl").read_text().splitlines()]
    assert len(items) == rep["calibration_set"]["items"] and len(scripted.calls) == 2 * len(items)
    assert set(items[0]["scores"]) == {"llm_judge", "llm_judge_mem0", "llm_judge_strict"}
    md = (out / "judges.md").read_text()
    assert "| mem0 | mem0-judge-2 | scripted | 1 | 100.0%" in md and "**lenient**" in md
    assert "lenient: mem0 →" in p.stdout
    # the judges.json is a calibration an eval / score run takes
    from ctxbench.metrics.judges.leniency import load_calibration
    assert load_calibration(out / "judges.json")["judges"]["strict"]["false_accept"] == 0.0
