"""Metric definitions against hand-computed values (LoCoMo F1 rules, set F1, BLEU-1, ROUGE)."""
from __future__ import annotations

import math

import pytest

from ctxbench.metrics.aggregate import aggregate, score_records
from ctxbench.metrics.base import NOT_MENTIONED, build_metrics, category_name
from ctxbench.metrics.cost import aggregate_cost, percentile
from ctxbench.metrics.qa import (Bleu1, LoCoMoF1, Rouge1, Rouge2, RougeL, SetF1, f1_score, normalize_answer,
                                 word_tokens)
from ctxbench.core.types import Question


def q(answer, cat, name=""):
    return Question(id="x", question="?", answer=answer, category=cat, category_name=name)


F1 = LoCoMoF1()


def test_normalize_matches_locomo():
    # commas dropped first, lowercase, punctuation out, a/an/the/and out, whitespace collapsed
    assert normalize_answer("The cat, and A dog!") == "cat dog"
    assert normalize_answer("Sand-castle, an island") == "sandcastle island"  # 'and' inside a word stays


@pytest.mark.parametrize("pred,gold,cat,expected", [
    ("The cat sat, on the mat.", "A cat on a mat", 4, 6 / 7),       # P=3/4, R=1
    ("running dogs", "run dog", 4, 1.0),                              # Porter stems
    ("paris paris", "paris", 2, 2 / 3),                               # multiset: 1 match, P=1/2
    ("salt and pepper", "pepper, salt", 4, 1.0),                      # 'and' and commas dropped
    ("in 2022", 2022, 2, 2 / 3),                                      # int gold answers are text
    ("", "Paris", 4, 0.0),
    ("hiking, painting", "painting, swimming, hiking", 1, 2 / 3),     # multi-hop: mean of best parts
    ("hiking, painting", "painting, swimming, hiking", 4, 0.8),       # same strings, plain F1
    ("yes", "Yes; she likes hiking", 3, 1.0),                         # open-domain: gold cut at ';'
    ("yes", "Yes; she likes hiking", 4, 0.4),                         # no cut: R=1/4
    ("Not mentioned in the conversation", NOT_MENTIONED, 5, 1.0),     # adversarial phrase rule
    ("(a) No information available.", NOT_MENTIONED, 5, 1.0),
    ("She went to Paris", NOT_MENTIONED, 5, 0.0),
    ("it was NOT MENTIONED", "", 5, 1.0),
])
def test_locomo_f1_rules(pred, gold, cat, expected):
    assert F1.score(pred, q(gold, cat)) == pytest.approx(expected)


def test_f1_rules_follow_category_name_not_only_id():
    assert F1.score("hiking, painting", q("painting, swimming, hiking", "x", "Multi_hop")) == pytest.approx(2 / 3)
    assert F1.score("yes", q("Yes; more", 0, "open domain")) == pytest.approx(1.0)
    assert F1.score("yes", q("Yes; more", "pwc")) == pytest.approx(2 / 3)  # other datasets: plain F1
    assert category_name(q("a", 3)) == "open-domain"


def test_f1_score_multiset_by_hand():
    # pred stems [a->dropped] "red red blue" vs "red blue blue green": common red1 blue1 = 2, P=2/3, R=2/4
    assert f1_score("red red blue", "red blue blue green") == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))


@pytest.mark.parametrize("pred,gold,expected", [
    ("Paris, Paris. France!", "paris france", 1.0),   # set, punctuation . , ! ? split
    ("the cat the dog", "the cat", 0.8),              # sets {the,cat,dog} vs {the,cat}: P=2/3, R=1
    ("running", "run", 0.0),                          # no stemming
    ("", "x", 0.0),
])
def test_set_f1(pred, gold, expected):
    assert SetF1().score(pred, q(gold, 4)) == pytest.approx(expected)


def test_set_f1_adversarial_reference_is_not_mentioned():
    assert SetF1().score("not mentioned in the conversation", q(NOT_MENTIONED, 5)) == pytest.approx(1.0)


@pytest.mark.parametrize("pred,gold,expected", [
    ("the cat is on the mat", "the cat sat on the mat", 5 / 6),  # clipped unigram precision 5/6, BP=1
    ("cat", "the cat sat", math.exp(1 - 3)),                     # precision 1, brevity penalty e^(1-3/1)
    ("Hello, World.", "hello world", 0.5),                       # tokens hello , world . -> 2/4
    ("", "x", 0.0),
])
def test_bleu1(pred, gold, expected):
    assert Bleu1().score(pred, q(gold, 4)) == pytest.approx(expected, abs=1e-9)


def test_word_tokens_split_sentences_without_nltk_data():
    assert word_tokens("Hi there. It is 7 May.") == ["hi", "there", ".", "it", "is", "7", "may", "."]


def test_rouge_by_hand():
    g = q("the cat sat on the mat", 4)
    # 'cats' stems to 'cat'; overlap 3 of 3 predicted, 3 of 6 reference -> F = 2/3
    assert Rouge1().score("the cats sat", g) == pytest.approx(2 / 3)
    # bigrams: 2 of 2 predicted, 2 of 5 reference -> F = 2*1*0.4/1.4
    assert Rouge2().score("the cats sat", g) == pytest.approx(0.8 / 1.4)
    assert RougeL().score("the cats sat", g) == pytest.approx(2 / 3)
    g2 = q("the cat on the mat", 4)
    assert Rouge1().score("mat the cat", g2) == pytest.approx(0.75)  # P=1, R=3/5
    assert RougeL().score("mat the cat", g2) == pytest.approx(0.5)   # LCS 'the cat': P=2/3, R=2/5


def test_build_metrics_needs_llm_for_judge():
    with pytest.raises(ValueError, match="needs an LLM"):
        build_metrics(["f1", "llm_judge"])
    assert [m.name for m in build_metrics(["f1", "rougeL"])] == ["f1", "rougeL"]


def test_llm_judge_parses_labels_and_skips_adversarial():
    from ctxbench.metrics.judge import LLMJudge, parse_label
    from tests.scripted_llm import ScriptedLLM

    assert parse_label('{"label": "CORRECT"}') == 1
    assert parse_label("Reasoning... WRONG") == 0
    assert parse_label("no idea") is None
    llm = ScriptedLLM(['{"label": "WRONG"}', 'The dates match. {"label": "CORRECT"}'])
    judge = LLMJudge(llm)
    assert judge.score("x", q("y", 4)) == 0.0
    assert judge.score("7 May", q("May 7", 2)) == 1.0
    assert judge.score("anything", q(NOT_MENTIONED, 5)) is None
    assert len(llm.calls) == 2 and "Gold answer: May 7" in llm.prompts[1]


def test_aggregate_by_category_name_with_ids():
    recs = [{"id": "a", "prediction": "paris", "answer": "Paris", "category": 4},
            {"id": "b", "prediction": "no", "answer": "London", "category": 4},
            {"id": "c", "prediction": "not mentioned", "answer": NOT_MENTIONED, "category": 5}]
    ms = build_metrics(["f1", "rouge1"])
    scored = score_records(recs, ms)
    assert [r["f1"] for r in scored] == [1.0, 0.0, 1.0]
    res = aggregate(scored, ["f1", "rouge1"])
    assert res["overall"]["n"] == 3 and res["overall"]["f1"] == pytest.approx(2 / 3, abs=1e-4)
    assert list(res["by_category"]) == ["single-hop", "adversarial"]
    # scores 1 and 0: resampled means 0, ½, 1 with probabilities ¼, ½, ¼ → stderr √(1/8) ≈ 0.354
    assert res["by_category"]["single-hop"] == pytest.approx(
        {"id": 4, "n": 2, "f1": 0.5, "rouge1": 0.5, "f1_stderr": 0.3536, "rouge1_stderr": 0.3536}, abs=0.03)
    assert res["by_category"]["adversarial"]["f1_stderr"] is None  # n = 1: no spread to estimate
    assert res["stderr"]["method"] == "bootstrap" and res["stderr"]["resamples"] == 1000


def test_cost_amortises_construction_per_question():
    con = {"prompt_tokens": 300, "completion_tokens": 60, "calls": 3, "seconds": 2.0, "memory_items": 4,
           "memory_tokens": 40, "kv_bytes": 0}
    recs = [{"history_id": "h1", "usage": {"answer_prompt_tokens": 10, "answer_completion_tokens": 2,
                                           "answer_calls": 1, "held_text": 8, "held_kv_slots": 0,
                                           "held_soft_slots": 0},
             "answer_seconds": s, "construction": con} for s in (1.0, 3.0, 2.0)]
    recs.append({"history_id": "h2", "usage": {"answer_prompt_tokens": 30, "answer_completion_tokens": 2,
                                               "answer_calls": 1, "held_text": 0, "held_kv_slots": 20,
                                               "held_soft_slots": 0},
                 "answer_seconds": 4.0, "construction": dict(con, prompt_tokens=100, calls=1, seconds=4.0)})
    c = aggregate_cost(recs)
    tq = c["tokens_per_question"]
    assert tq["answer_prompt"] == 15.0 and "context" not in tq
    held = c["held_per_question"]
    assert (held["text"], held["kv_slots"], held["total"]) == (6.0, 5.0, 11.0)  # one axis: text + KV slots
    old = [dict(r, usage={"answer_prompt_tokens": 10, "context_tokens": 8}) for r in recs]  # before cost-4
    assert aggregate_cost(old)["held_per_question"] is None and "predate" in aggregate_cost(old)["held_missing"]
    assert tq["construction_prompt_amortised"] == 100.0          # (300 + 100) / 4 questions
    assert tq["construction_completion_amortised"] == 30.0       # (60 + 60) / 4
    assert c["llm_calls_per_question"] == {"answer": 1.0, "construction_amortised": 1.0, "total": 2.0}
    assert c["latency_s"]["answer"]["p50"] == 2.5 and c["latency_s"]["ingest"]["total"] == 6.0
    assert c["memory_per_history"]["items"] == 4.0
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)


def test_latency_is_over_real_calls_with_the_cached_share_beside_it():
    """An answer served wholly by the call cache (0.01 s) beside real ones (80 s): before issue 54 both went into
    the percentiles (p50 of [0.01, 0.01, 0.01, 80, 80] = 0.01 s); now only real calls (p50 80 s), 60% cached."""
    def rec(s: float, cached: int, h: str = "h1") -> dict:
        return {"history_id": h, "answer_seconds": s,
                "usage": {"answer_calls": 1, "extra": {"cached_calls": cached} if cached else {}},
                "construction": {"calls": 2, "cached_calls": 2 if h == "h2" else 0, "seconds": 0.02 if h == "h2" else 30.0}}
    recs = [rec(0.01, 1), rec(0.01, 1), rec(0.01, 1, "h2"), rec(80.0, 0), rec(80.0, 0, "h2")]
    lat = aggregate_cost(recs)["latency_s"]
    assert lat["answer"]["p50"] == 80.0 and lat["answer"]["n"] == 2
    assert lat["answer"]["cached"] == 3 and lat["answer"]["cached_share"] == 0.6
    assert lat["ingest"]["total"] == 30.0 and lat["ingest"]["cached"] == 1 and lat["ingest"]["n"] == 1
    own = [{"history_id": "m", "answer_seconds": 2.0, "usage": {"answer_calls": 0}, "construction": {}}]
    assert aggregate_cost(own)["latency_s"]["answer"]["p50"] == 2.0  # a method's own decoding is always real
