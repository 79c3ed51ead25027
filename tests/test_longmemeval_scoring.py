"""LongMemEval scoring as the paper scores: per-type judge templates, abstention judged with its own,
the results.json ``longmemeval`` block (per type, overall, task-averaged, abstention apart), and the
dataset's own judge when judge.panel is unset."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from ctxbench.core.types import Question
from ctxbench.evaluation.finalize import finalize
from ctxbench.metrics.aggregate import record_question
from ctxbench.metrics.judge import LLMJudge
from ctxbench.metrics.judges.panel import panel_names, with_dataset_judge
from ctxbench.metrics.longmemeval_scoring import longmemeval_block
from ctxbench.metrics.qa import LoCoMoF1

from memory_scripted import ScriptedLLM, prompt_text


def judged(question: Question, judge: str = "longmemeval") -> tuple[float | None, str]:
    llm = ScriptedLLM(lambda m, p: "yes")
    score = LLMJudge(llm=llm, judge=judge).score("I don't know.", question)
    return score, prompt_text(llm.calls[-1][1]) if llm.calls else ""


def test_abstention_questions_get_the_abstention_template_and_are_judged():
    q = Question("q7_abs", "What did I name my dog?", "You never mentioned a dog.", category="single-session-user",
                 category_name="single-session-user")
    score, prompt = judged(q)
    assert score == 1.0 and "unanswerable question" in prompt
    flagged = Question("q8", "?", "x", category_name="multi-session", meta={"abstention": True})
    assert "unanswerable question" in judged(flagged)[1]
    # a record read back from predictions.jsonl keeps the flag
    rec = {"id": "q9", "question": "?", "answer": "x", "category": "multi-session", "abstention": True}
    assert "unanswerable question" in judged(record_question(rec))[1]
    assert judged(q, "mem0")[1]  # other judges judge it too (a call is made, unlike LoCoMo's adversarial)


def test_each_type_gets_its_own_template():
    temporal = Question("t1", "How many days between the trips?", "18", category_name="temporal-reasoning")
    assert "off-by-one" in judged(temporal)[1]
    update = Question("k1", "Where do I live now?", "Porto", category_name="knowledge-update")
    assert "updated answer" in judged(update)[1]
    pref = Question("p1", "Suggest a dinner.", "vegetarian", category_name="single-session-preference")
    assert "Rubric" in judged(pref)[1]
    plain = Question("u1", "What colour is my bike?", "red", category_name="single-session-user")
    prompt = judged(plain)[1]
    assert "unanswerable" not in prompt and "off-by-one" not in prompt


def test_f1_category_rules_do_not_fire_on_longmemeval_types():
    f1 = LoCoMoF1()
    q = Question("m1", "?", "Lisbon and Porto", category="multi-session", category_name="multi-session")
    assert f1.score("not mentioned", q) == 0.0  # category 5's phrase rule is LoCoMo's only
    assert f1.score("Lisbon and Porto", q) == 1.0


def test_task_averaged_differs_from_overall_on_a_hand_made_set():
    recs = ([{"id": f"u{i}", "category_name": "single-session-user", "llm_judge": 1.0} for i in range(3)]
            + [{"id": "m1", "category_name": "multi-session", "llm_judge": 0.0}]
            + [{"id": "m2_abs", "category_name": "multi-session", "llm_judge": 1.0, "abstention": True}])
    block = longmemeval_block(recs, ["llm_judge"])
    assert block["by_type"]["single-session-user"] == {"n": 3, "llm_judge": 1.0}
    assert block["by_type"]["multi-session"] == {"n": 2, "llm_judge": 0.5}
    assert block["overall"]["llm_judge"] == pytest.approx(0.8)  # 4 of 5
    assert block["task_averaged"] == {"types": 2, "llm_judge": 0.75}  # (1.0 + 0.5) / 2
    assert block["abstention"] == {"n": 1, "llm_judge": 1.0}
    assert longmemeval_block([{"id": "a", "category": 1, "f1": 1.0}], ["f1"]) is None  # LoCoMo: no block


def test_results_files_carry_both_blocks_and_failed_answers_count_zero(tmp_path):
    hit = {"meta": {"retrieved": [{"session": "s1", "turns": ["s1_1"]}]}}
    records = [
        {"id": "a", "question": "?", "answer": "Luna", "prediction": "Luna", "category": "single-session-user",
         "category_name": "single-session-user", "evidence": ["s1_1"], "evidence_sessions": ["s1"], **hit},
        {"id": "b", "question": "?", "answer": "Porto", "prediction": "", "category": "knowledge-update",
         "category_name": "knowledge-update", "evidence_sessions": ["s2"], "failed": True},
    ]
    results = finalize(tmp_path, records, [LoCoMoF1()], OmegaConf.create({}), "score", with_cost=False,
                       progress=False)
    lme = results["longmemeval"]
    assert lme["by_type"]["knowledge-update"]["f1"] == 0.0 and lme["overall"]["f1"] == 0.5
    assert results["evidence_recall"]["n"] == 1 and results["evidence_recall"]["session"]["recall_any@1"] == 1.0
    md = (tmp_path / "results.md").read_text()
    assert "## LongMemEval" in md and "## Evidence recall" in md
    assert json.loads((tmp_path / "results.json").read_text())["longmemeval"]["task_averaged"]["types"] == 2


def test_the_dataset_judge_is_used_when_the_panel_is_unset():
    lme = OmegaConf.create({"name": "longmemeval_sample"})
    unset = OmegaConf.create({"panel": None, "runs": 1})
    assert panel_names(with_dataset_judge(unset, lme)) == ["longmemeval"]
    assert panel_names(with_dataset_judge(OmegaConf.create({"panel": ["mem0"]}), lme)) == ["mem0"]  # named: kept
    assert panel_names(with_dataset_judge(unset, OmegaConf.create({"name": "locomo"}))) == ["mem0"]
