"""The evaluator with a scripted LLM on in-code samples: prompts, baselines, results, resume."""
from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.config.compose import option_config

from ctxbench.qa import get_prompt
from ctxbench.evaluation.evaluator import evaluate_samples, run_system
from ctxbench.memory.baselines import FullContext, NoContext
from ctxbench.qa.forms import (CONV_START_PROMPT, NOT_MENTIONED, QA_PROMPT, adversarial_options, postprocess,
                                 qa_prompt)
from ctxbench.core.render import render_history
from ctxbench.core.types import History, Question, Sample, Session, Turn
from tests.scripted_llm import ScriptedLLM


def history(hid: str, n_sessions: int = 2, turns: int = 3) -> History:
    sessions = [Session(id=f"session_{s + 1}", date=f"d{s + 1}",
                        turns=[Turn(speaker="Ann" if t % 2 == 0 else "Bob", text=f"{hid} s{s + 1} t{t + 1} words",
                                    id=f"D{s + 1}:{t + 1}") for t in range(turns)])
                for s in range(n_sessions)]
    return History(id=hid, sessions=sessions, speakers=["Ann", "Bob"])


def samples() -> list[Sample]:
    out = []
    for hid in ("h1", "h2"):
        out.append(Sample(history(hid), [
            Question(id=f"{hid}-q0", question=f"Where does {hid} live?", answer="Paris", category=4,
                     category_name="single-hop"),
            Question(id=f"{hid}-q1", question=f"When did {hid} move?", answer="7 May 2023", category=2,
                     category_name="temporal"),
            Question(id=f"{hid}-q2", question=f"Did {hid} buy a boat?", answer=NOT_MENTIONED, category=5,
                     category_name="adversarial", adversarial_answer="a red boat"),
        ]))
    return out


def oracle(messages, **kw) -> str:
    """Answers each question right: 'Paris', a date, and the option letter of 'not mentioned'."""
    prompt = messages[-1]["content"]
    if "live?" in prompt:
        return "Paris"
    if "move?" in prompt:
        return "7 May 2023"
    return "(a)" if "(a) Not mentioned" in prompt else "b"


# ---- prompts -----------------------------------------------------------------------------------

def test_prompts_follow_the_locomo_reference():
    h = history("h1", 1, 2)
    qs = samples()[0].questions
    ctx = render_history(h, "locomo")
    assert ctx == 'DATE: d1\nCONVERSATION:\nAnn said, "h1 s1 t1 words"\nBob said, "h1 s1 t2 words"\n\n\n'
    p = qa_prompt(qs[0], ctx, h.speakers)
    assert p == CONV_START_PROMPT.format("Ann", "Bob") + ctx + "\n\n" + QA_PROMPT.format("Where does h1 live?")
    assert qa_prompt(qs[1], ctx).endswith(
        "Question: When did h1 move? Use DATE of CONVERSATION to answer with an approximate date. Short answer:\n")
    adv = qa_prompt(qs[2], ctx)
    opts = adversarial_options(qs[2])
    assert sorted(opts.values()) == sorted([NOT_MENTIONED, "a red boat"])
    assert f"Select the correct answer: (a) {opts['a']} (b) {opts['b']}. " in adv
    assert "write an answer in the form of a short phrase" not in adv  # QA_PROMPT_CAT_5
    # reply letters map back to the options (reference get_cat_5_answer); longer replies stay
    assert postprocess(qs[2], " a ") == opts["a"] and postprocess(qs[2], "(b)") == opts["b"]
    assert postprocess(qs[2], "Not mentioned.") == "Not mentioned."
    assert adversarial_options(qs[2]) == opts  # stable


def test_plain_and_choice_styles_for_other_datasets():
    pwc = Question(id="p", question="Summarize the text.", answer="x", category="pwc")
    assert qa_prompt(pwc, "CTX") == "CTX\n\n\nSummarize the text.\n"
    mc = Question(id="m", question="Who?", answer="Joey", category="dialsim", options=["Ross", "Joey"])
    assert "(A) Ross (B) Joey" in qa_prompt(mc, "CTX") and postprocess(mc, "(B)") == "Joey"


# ---- baselines ---------------------------------------------------------------------------------

def test_full_context_cuts_oldest_turns_to_fit():
    from ctxbench.memory.baselines import QUESTION_ALLOWANCE

    h = history("h1", n_sessions=3, turns=4)  # 12 turns of 6 whitespace tokens
    llm = ScriptedLLM("ok", context_window=170)
    sys_ = FullContext(option_config("memory", {"name": "full_context", "reserve": 10, "max_new_tokens": 8}), llm=llm)
    sys_.use_prompt(get_prompt("locomo"))  # one user message: its tokens are the whole prompt's
    sys_.ingest(h)
    q = samples()[0].questions[0]
    pred = sys_.answer(q)
    prompt = llm.prompts[-1]
    cut = pred.usage.extra["truncated_turns"]
    assert 0 < cut < 12 and pred.usage.extra["total_turns"] == 12
    assert "h1 s3 t4 words" in prompt and "h1 s1 t1 words" not in prompt  # newest kept, oldest cut
    budget = llm.context_window - sys_.reserve
    assert llm.count_tokens(prompt) <= budget
    # maximal: one more turn would not fit beside a question of QUESTION_ALLOWANCE tokens
    blank = dataclasses.replace(q, question="")
    own = llm.count_tokens(qa_prompt(q, "x", h.speakers)) - llm.count_tokens(qa_prompt(blank, "x", h.speakers))
    one_more = qa_prompt(q, sys_._render(cut - 1), h.speakers)
    assert llm.count_tokens(one_more) + QUESTION_ALLOWANCE - own > budget
    longer = Question(id="q2", question="Where does h1 live and work and sleep and eat?", answer="x", category=4)
    assert sys_.answer(longer).usage.extra["truncated_turns"] == cut  # one cut per history, not per question
    assert pred.usage.extra["truncated_tokens"] == 6 * cut
    assert pred.usage.answer_calls == 1 and pred.usage.answer_prompt_tokens == llm.count_tokens(prompt)
    assert pred.usage.held_text == llm.count_tokens(sys_._render(cut))
    assert (pred.usage.memory_items, pred.usage.memory_tokens) == (12, 72)  # the whole history is kept


def test_full_context_keeps_everything_when_it_fits_and_no_context_sees_nothing():
    h = history("h1")
    llm = ScriptedLLM("ok", context_window=4096)
    fc = FullContext(option_config("memory", {"name": "full_context"}), llm=llm)
    fc.use_prompt(get_prompt("locomo"))
    fc.ingest(h)
    p = fc.answer(samples()[0].questions[0])
    assert p.usage.extra["truncated_turns"] == 0 and llm.prompts[-1].count("said,") == 6
    nc = NoContext(option_config("memory", {"name": "no_context"}), llm=llm)
    nc.use_prompt(get_prompt("locomo"))
    nc.ingest(h)
    nc.answer(samples()[0].questions[0])
    assert "said," not in llm.prompts[-1] and llm.prompts[-1].startswith("Based on the above context")


def test_full_context_document_keeps_the_end():
    doc = History(id="d", text=" ".join(f"w{i}" for i in range(500)))
    llm = ScriptedLLM("ok", context_window=200)
    fc = FullContext(option_config("memory", {"name": "full_context", "reserve": 20}), llm=llm)
    fc.ingest(doc)
    p = fc.answer(Question(id="q", question="What?", answer="x", category="pwc"))
    assert "w499" in llm.prompts[-1] and "w0 " not in llm.prompts[-1]
    assert llm.count_tokens(llm.prompts[-1]) <= 180 and p.usage.extra["truncated_tokens"] > 300


# ---- evaluator ---------------------------------------------------------------------------------

class Counting(FullContext):
    """FullContext that counts ingests and answers, and can crash after ``crash_after`` answers."""

    def __init__(self, llm, crash_after=None):
        super().__init__(option_config("memory", {"name": "full_context"}), llm=llm)
        self.ingested, self.answered, self.crash_after = [], 0, crash_after

    def ingest(self, history):
        self.ingested.append(history.id)
        super().ingest(history)

    def answer(self, question):
        if self.crash_after is not None and self.answered >= self.crash_after:
            raise RuntimeError("simulated crash")
        self.answered += 1
        return super().answer(question)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_evaluate_writes_results_with_categories_and_cost(tmp_path):
    llm = ScriptedLLM(oracle)
    res = evaluate_samples(Counting(llm), samples(), tmp_path, llm=llm, cfg={"seed": 3})
    recs = read(tmp_path / "predictions.jsonl")
    assert len(recs) == 6 and {r["f1"] for r in recs} == {1.0}
    adv = [r for r in recs if r["category"] == 5]
    assert all(r["prediction"] == NOT_MENTIONED and r["raw_prediction"] in ("(a)", "b") for r in adv)
    assert res["overall"]["n"] == 6 and res["overall"]["f1"] == 1.0
    assert list(res["by_category"]) == ["temporal", "single-hop", "adversarial"]
    assert res["by_category"]["temporal"]["id"] == 2 and res["by_category"]["temporal"]["n"] == 2
    cost = res["cost"]
    assert cost["n_histories"] == 2 and cost["llm_calls_per_question"]["answer"] == 1.0
    per_q = [r["usage"]["answer_prompt_tokens"] for r in recs]
    assert cost["tokens_per_question"]["answer_prompt"] == pytest.approx(sum(per_q) / 6, abs=0.01)
    assert cost["held_per_question"]["text"] == cost["held_per_question"]["total"] > 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["metrics"]["f1"]["version"] and saved["seed"] == 3 and "git" in saved
    md = (tmp_path / "results.md").read_text()
    assert "| single-hop | 4 | 2 |" in md and "**overall**" in md
    assert "| held per question: text tokens + KV slots + soft slots | " in md


def test_resume_after_crash_answers_nothing_twice(tmp_path):
    ref_llm = ScriptedLLM(oracle)
    ref = evaluate_samples(Counting(ref_llm), samples(), tmp_path / "ref", llm=ref_llm)

    run = tmp_path / "run"
    llm1 = ScriptedLLM(oracle)
    with pytest.raises(RuntimeError, match="simulated crash"):
        evaluate_samples(Counting(llm1, crash_after=4), samples(), run, llm=llm1)
    assert len(read(run / "predictions.jsonl")) == 4 and not (run / "results.json").exists()
    with open(run / "predictions.jsonl", "a") as f:  # a torn line from a kill mid-write
        f.write('{"id": "h2-q1", "predi')

    llm2 = ScriptedLLM(oracle)
    sys2 = Counting(llm2)
    res = evaluate_samples(sys2, samples(), run, llm=llm2)
    assert sys2.ingested == ["h2"]            # h1 fully answered: not ingested again
    assert sys2.answered == 2 and len(llm2.calls) == 2
    recs = read(run / "predictions.jsonl")
    ids = [r["id"] for r in recs]
    assert ids == [f"h{h}-q{i}" for h in (1, 2) for i in range(3)]  # each once, dataset order
    for key in ("overall", "by_category"):
        assert res[key] == ref[key]
    ref_recs = read(tmp_path / "ref" / "predictions.jsonl")
    assert [r["prediction"] for r in recs] == [r["prediction"] for r in ref_recs]

    llm3 = ScriptedLLM(oracle)  # a third run finds everything answered
    sys3 = Counting(llm3)
    evaluate_samples(sys3, samples(), run, llm=llm3)
    assert sys3.ingested == [] and llm3.calls == []


def test_limit_and_reset_per_history(tmp_path):
    llm = ScriptedLLM(oracle)
    sys_ = Counting(llm)
    recs = run_system(sys_, samples(), tmp_path, llm=llm, limit=4, progress=False)
    assert [r["id"] for r in recs] == ["h1-q0", "h1-q1", "h1-q2", "h2-q0"]
    assert sys_.ingested == ["h1", "h2"]
    assert "h2 s1 t1" in llm.prompts[-1] and "h1 s1 t1" not in llm.prompts[-1]  # fresh state


def test_duplicate_question_ids_are_an_error(tmp_path):
    from ctxbench.data.errors import DataError

    s = samples()
    s[1].questions[0].id = "h1-q0"
    with pytest.raises(DataError, match="duplicate question id"):
        run_system(Counting(ScriptedLLM(oracle)), s, tmp_path, progress=False)


def test_construction_cost_comes_from_the_system_or_the_meter(tmp_path):
    class Builder(NoContext):
        def ingest(self, history):
            super().ingest(history)
            for _ in range(2):
                self.llm.chat([{"role": "user", "content": "summarise five words here"}], phase="construction")

    llm = ScriptedLLM(lambda m, **kw: "sum mary" if kw["phase"] == "construction" else "Paris")
    res = evaluate_samples(Builder(OmegaConf.create({}), llm=llm), samples(), tmp_path, llm=llm)
    tq = res["cost"]["tokens_per_question"]
    assert tq["construction_prompt_amortised"] == pytest.approx(2 * 2 * 4 / 6, abs=0.01)  # 2 calls x 4 words x 2 h
    assert tq["construction_completion_amortised"] == pytest.approx(2 * 2 * 2 / 6, abs=0.01)
    assert res["cost"]["llm_calls_per_question"]["construction_amortised"] == pytest.approx(4 / 6, abs=1e-3)


def test_results_redact_secrets_and_carry_metadata(tmp_path):
    cfg = OmegaConf.create({"seed": 7, "llm": {"name": "openai", "api_key": "sk-abcdefghijkl",
                                               "api_key_env": "OPENAI_API_KEY"}})
    llm = ScriptedLLM(oracle)
    evaluate_samples(Counting(llm), samples()[:1], tmp_path, llm=llm, cfg=cfg)
    text = (tmp_path / "results.json").read_text()
    assert "sk-abcdefghijkl" not in text
    saved = json.loads(text)
    assert saved["config"]["llm"]["api_key"] == "***" and saved["config"]["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert saved["seed"] == 7 and saved["command"] == "eval"
    assert set(saved["metrics"]) == {"f1", "f1_set", "bleu1", "rouge1", "rouge2", "rougeL"}
