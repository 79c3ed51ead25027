"""The answer prompt registry (``qa_prompt=locomo|mem0|mem0g|amem|brief|ruler|longmemeval``, ctxbench/qa/).

Shows: each prompt renders what its source says (golden strings, one question of each LoCoMo
category and the plain/choice forms: tests/test_qa_prompts_golden.json); ``locomo`` is byte for byte
ctxbench's prompt before the registry; the chosen prompt reaches every system kind (memory systems,
baselines, MemGPT's fallback, ReadAgent, a KV method, ICAE's instruction); its cap applies unless the
system's config sets one; post-processing is applied once by the evaluator with the raw reply kept;
results.json records name, version, source and cap; a resume with another qa_prompt is refused.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.core.errors import ConfigError
from ctxbench.evaluation.evaluator import build_system, evaluate_samples, run_system
from ctxbench.qa import PROMPTS, AnswerPrompt, get_prompt
from ctxbench.qa import compare as cmp
from ctxbench.qa.prompts import amem, brief, mem0
from ctxbench.runs.guard import RunFolderError, check_config
from ctxbench.core.types import History, Question, Sample, Session, Turn

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "ctxbench" / "conf"
GOLDEN = json.loads((Path(__file__).parent / "test_qa_prompts_golden.json").read_text())
CTX, SPEAKERS = GOLDEN["context"], GOLDEN["speakers"]


def questions() -> dict[str, Question]:
    """The golden file's questions (one per LoCoMo category, a plain and a multiple-choice one)."""
    return {
        "multi-hop": Question("q1", "What do Alice and Bob both like?", "apples", category=1),
        "temporal": Question("q2", "When did Alice go to Paris?", "May 2023", category=2),
        "open-domain": Question("q3", "Would Alice enjoy hiking?", "yes", category=3),
        "single-hop": Question("q4", "What is Bob's dog called?", "Rex", category=4),
        "adversarial": Question("q5", "What is Bob's cat called?", "", category=5, adversarial_answer="Tom"),
        "plain": Question("q6", "Summarise the document.", "x", category_name="pwc", meta={"prompt_style": "plain"}),
        "choice": Question("q7", "Who spoke first?", "Alice", options=["Alice", "Bob"], category_name="dialsim",
                           meta={"prompt_style": "choice"}),
    }


def history() -> History:
    turns = [Turn("Alice", "I like apples and my dog Rex.", "D1:1"), Turn("Bob", "Me too, Rex is great.", "D1:2")]
    return History(id="h", sessions=[Session("s1", turns, "1:00 pm on 1 May, 2023")], speakers=["Alice", "Bob"])


# ---- rendering -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PROMPTS))
@pytest.mark.parametrize("kind", sorted(questions()))
def test_each_prompt_renders_its_golden_strings(name, kind):
    p, q, gold = get_prompt(name), questions()[kind], GOLDEN["prompts"][name][kind]
    assert p.messages(q, CTX, SPEAKERS) == gold["with_context"]
    assert p.messages(q, "") == gold["no_context"]
    assert p.instruction(q) == gold["instruction"]


@pytest.mark.parametrize("kind", sorted(questions()))
def test_locomo_is_byte_identical_to_the_prompt_before_the_registry(kind):
    """'before' was written by ctxbench.qa.forms.qa_messages / memory_messages / qa_instruction."""
    p, q, before = get_prompt("locomo"), questions()[kind], GOLDEN["before"][kind]
    assert p.messages(q, CTX, SPEAKERS) == before["with_context"]
    assert p.messages(q, CTX) == before["memory"]
    assert p.messages(q, "") == before["no_context"]
    assert p.instruction(q) == before["instruction"]
    assert p.system is None and p.max_new_tokens == 32


def test_sources_are_cited_and_versions_distinct():
    assert [p.version for p in PROMPTS.values()] == [f"{n}-v1" for n in PROMPTS]
    assert "snap-research/locomo task_eval/evaluate_gpts.py" in PROMPTS["locomo"].source
    assert "mem0ai/mem0 evaluation/prompts.py ANSWER_PROMPT " in PROMPTS["mem0"].source
    assert "ANSWER_PROMPT_GRAPH" in PROMPTS["mem0g"].source
    assert "WujiangXu/A-mem test_advanced.py" in PROMPTS["amem"].source
    assert "issue 22" in PROMPTS["brief"].source
    assert "xiaowu0162/LongMemEval src/generation/run_generation.py" in PROMPTS["longmemeval"].source


def dated(q: Question, date: str = "2023/04/22 (Sat) 18:00") -> Question:
    from dataclasses import replace
    return replace(q, meta={**q.meta, "question_date": date})


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_every_prompt_shows_the_question_date_once_and_only_when_there_is_one(name):
    p = get_prompt(name)
    for kind, q in questions().items():
        if name == "ruler":  # RULER's questions have no date; its prompt reads the question text as given
            continue
        plain, with_date = p.messages(q, CTX, SPEAKERS), p.messages(dated(q), CTX, SPEAKERS)
        text = "".join(m["content"] for m in with_date)
        assert "2023/04/22 (Sat) 18:00" not in "".join(m["content"] for m in plain)
        assert text.count("2023/04/22 (Sat) 18:00") == 1, (name, kind)
        assert p.instruction(dated(q)).count("2023/04/22 (Sat) 18:00") == 1
        assert p.messages(dated(q), "")[-1]["content"].count("2023/04/22 (Sat) 18:00") == 1


def test_longmemeval_prompt_is_history_then_current_date_then_question():
    q = dated(Question("lme", "How many days ago did I go to my first pottery class?", "14 days",
                       category="temporal-reasoning", category_name="temporal-reasoning"))
    [msg] = get_prompt("longmemeval").messages(q, "HISTORY")
    assert msg == {"role": "user", "content": (
        "I will give you several history chats between you and a user. Please answer the question based on the "
        "relevant chat history.\n\n\nHistory Chats:\n\nHISTORY\n\nCurrent Date: 2023/04/22 (Sat) 18:00\n"
        "Question: How many days ago did I go to my first pottery class?\nAnswer:")}
    assert get_prompt("brief").messages(q, "H")[1]["content"] == (
        "Conversation:\nH\n\nQuestion: (Current date: 2023/04/22 (Sat) 18:00) How many days ago did I go to my "
        "first pottery class?\nAnswer:")


def test_mem0_is_one_system_message_with_the_source_instructions():
    msgs = get_prompt("mem0").messages(questions()["single-hop"], "2023-05-01: Bob has a dog named Rex")
    assert [m["role"] for m in msgs] == ["system"]
    text = msgs[0]["content"]
    assert text.startswith("\n    You are an intelligent memory assistant tasked with retrieving accurate "
                           "information from conversation memories.\n\n    # CONTEXT:\n")
    assert "    8. The answer should be less than 5-6 words.\n" in text
    assert "These memories contain \n    timestamped" in text  # the source's trailing space kept
    assert text.endswith("    Memories:\n\n    2023-05-01: Bob has a dog named Rex\n\n"
                         "    Question: What is Bob's dog called?\n\n    Answer:\n    ")
    graph = get_prompt("mem0g").messages(questions()["single-hop"], "x")[0]["content"]
    assert "9. Use the knowledge graph relations" in graph and "9. Use the knowledge" not in text


def test_amem_per_category_prompts_and_json_system():
    p, qs = get_prompt("amem"), questions()
    sys_, user = (m["content"] for m in p.messages(qs["temporal"], "CTX"))
    assert sys_ == "You must respond with a JSON object."
    assert user == (f"\n{amem.IND}Based on the context: CTX, answer the following question. Use DATE of CONVERSATION "
                    f"to answer with an approximate date.\n{amem.IND}Please generate the shortest possible answer, "
                    "using words from the conversation where possible, and avoid using any subjects.   \n\n"
                    f"{amem.IND}Question: When did Alice go to Paris? Short answer:\n{amem.IND}")
    single = p.messages(qs["single-hop"], "CTX")[1]["content"]
    assert single.startswith("Based on the context: CTX, write an answer in the form of a short phrase")
    assert p.messages(qs["open-domain"], "CTX")[1]["content"] == f"\n{amem.IND}" + single.replace(
        "What is Bob's dog called?", "Would Alice enjoy hiking?")
    adv = p.messages(qs["adversarial"], "CTX")[1]["content"]
    assert "Select the correct answer: Not mentioned in the conversation or Tom  Short answer:" in adv or \
        "Select the correct answer: Tom or Not mentioned in the conversation  Short answer:" in adv


def test_brief_is_a_short_system_message_then_context_and_question():
    msgs = get_prompt("brief").messages(questions()["temporal"], "CTX")
    assert msgs == [{"role": "system", "content": brief.SYSTEM},
                    {"role": "user", "content": "Conversation:\nCTX\n\nQuestion: When did Alice go to Paris? "
                                                "Use DATE of CONVERSATION to answer with an approximate date.\nAnswer:"}]
    assert get_prompt("brief").max_new_tokens == 48 and get_prompt("brief").first_line


def test_unknown_prompt_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^qa_prompt='lcomo' is not an answer prompt; use one of locomo, "
                                          r"mem0, mem0g, amem, brief, ruler, longmemeval$"):
        get_prompt("lcomo")


# ---- post-processing -----------------------------------------------------------------------------

def test_postprocess_rules_per_prompt_and_idempotent():
    q, adv = questions()["single-hop"], questions()["adversarial"]
    b = get_prompt("brief")
    assert b.postprocess(q, "\n  Rex\nbecause Bob said so") == "Rex"
    assert b.postprocess(q, "x" * 300) == "x" * 200
    assert get_prompt("locomo").postprocess(q, " Rex\nbecause ") == "Rex\nbecause"  # no first-line rule
    a = get_prompt("amem")
    assert a.postprocess(q, '{"answer": "Rex"}') == "Rex" and a.postprocess(q, "Rex") == "Rex"
    assert a.postprocess(q, '```json\n{"answer": "a dog"}\n```') == "a dog"
    opts = ["Not mentioned in the conversation", "Tom"]
    for p in PROMPTS.values():  # the option-letter mapping still applies after each prompt's rules
        assert p.postprocess(adv, "(b)") in opts
        for raw in ("Rex\nmore", '{"answer": "x"}', "y" * 250):
            once = p.postprocess(q, raw)
            assert p.postprocess(q, once) == once


def test_evaluator_postprocesses_once_and_keeps_the_raw_reply(tmp_path, monkeypatch):
    calls = {"n": 0}
    original = AnswerPrompt.postprocess

    def counting(self, question, text):
        calls["n"] += 1
        return original(self, question, text)
    monkeypatch.setattr(AnswerPrompt, "postprocess", counting)
    raw = "Rex " + "x" * 250  # one line, longer than brief's 200 characters: the raw reply is kept whole
    llm = ScriptedLLM(raw)
    system = registry.build("memory", option_config("memory", {"name": "no_context", "max_new_tokens": None}), llm=llm)
    system.use_prompt(get_prompt("brief"))
    qs = [questions()["single-hop"], questions()["multi-hop"]]
    recs = run_system(system, [Sample(history(), qs)], tmp_path, llm=llm, progress=False)
    assert calls["n"] == 2
    assert [r["prediction"] for r in recs] == [raw[:200]] * 2
    assert recs[0]["raw_prediction"] == raw
    kept = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert kept[0]["raw_prediction"] == raw and kept[0]["prediction"] == raw[:200]


def test_brief_answer_calls_stop_at_the_first_line_and_answers_do_not_change(tmp_path):
    """brief declares stop=["\\n"]: the answer call carries it, the scripted backend cuts the reply there
    (marked stopped), and the post-processed prediction is what the whole reply gives."""
    reply = "\n  Rex\nBecause Alice said so."
    llm = ScriptedLLM(reply)
    prompt = get_prompt("brief")
    system = registry.build("memory", option_config("memory", {"name": "no_context", "max_new_tokens": None}), llm=llm)
    system.use_prompt(prompt)
    q = questions()["single-hop"]
    recs = run_system(system, [Sample(history(), [q])], tmp_path, llm=llm, progress=False)
    assert [c.get("stop") for c in answer_calls(llm)] == [["\n"]]
    assert recs[0]["raw_prediction"].strip() == "Rex"
    assert recs[0]["prediction"] == prompt.postprocess(q, reply) == "Rex"
    assert get_prompt("locomo").call_kwargs() == {} and prompt.call_kwargs() == {"stop": ["\n"]}
    with pytest.raises(ValueError, match="would change its answers"):
        dataclasses.replace(get_prompt("locomo"), stop=("\n",))  # locomo keeps every line


# ---- the prompt reaches every system -------------------------------------------------------------

def memory_cfg(name: str, **kw):
    c = load_conf_file(CONF / "memory" / f"{name}.yaml")
    c.progress = False
    return OmegaConf.merge(c, kw)


def answer_calls(llm: ScriptedLLM) -> list[dict]:
    return [c for c in llm.calls if c["phase"] == "answer"]


@pytest.mark.parametrize("name", ["rag", "full_context", "no_context"])
def test_memory_systems_and_baselines_answer_with_the_chosen_prompt(tmp_path, name):
    llm = ScriptedLLM("Rex")
    c = memory_cfg(name)
    system = registry.build("memory", c, llm=llm, embedder=BowEmbedder() if registry.get("memory", c.name).needs_embedder else None,
                            workdir=tmp_path)
    system.use_prompt(get_prompt("brief"))
    system.ingest(history())
    system.answer(questions()["single-hop"])
    call = answer_calls(llm)[-1]
    assert call["messages"][0] == {"role": "system", "content": brief.SYSTEM}
    assert call["messages"][1]["content"].endswith("Question: What is Bob's dog called?\nAnswer:")
    assert call["max_new_tokens"] == 48  # the configs leave the cap to the prompt
    if name != "no_context":
        assert "Rex" in call["messages"][1]["content"]  # the context is in the user message


def test_a_config_cap_wins_over_the_prompt_cap(tmp_path):
    llm = ScriptedLLM("Rex")
    system = registry.build("memory", memory_cfg("full_context", max_new_tokens=7), llm=llm)
    system.use_prompt(get_prompt("brief"))
    system.ingest(history())
    system.answer(questions()["single-hop"])
    assert answer_calls(llm)[-1]["max_new_tokens"] == 7 == system.answer_max_tokens()


def test_memgpt_fallback_answer_uses_the_prompt(tmp_path):
    def respond(messages, phase, **kw):
        if phase == "construction":
            return "SUM"
        if "intelligent memory assistant" in messages[0]["content"]:
            return "Rex"
        return json.dumps({"function": "conversation_search", "args": {"query": "Rex"}})
    llm = ScriptedLLM(respond)
    c = memory_cfg("memgpt", max_steps=1)
    system = registry.build("memory", c, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    system.use_prompt(get_prompt("mem0"))
    system.ingest(history())
    pred = system.answer(questions()["single-hop"])
    last = answer_calls(llm)[-1]
    assert pred.text == "Rex" and pred.usage.extra["fallback_answer"]
    assert [m["role"] for m in last["messages"]] == ["system"] and last["max_new_tokens"] == 128


def test_readagent_answers_with_the_prompt(tmp_path):
    def respond(messages, phase, **kw):
        user = messages[-1]["content"]
        if user.endswith("JSON:"):
            return json.dumps({"break": 1})
        if phase == "construction":
            return "They talked."
        return '{"pages": [0]}' if "read again" in user else '{"answer": "Rex"}'
    llm = ScriptedLLM(respond)
    system = registry.build("memory", memory_cfg("readagent"), llm=llm, embedder=None, workdir=tmp_path)
    system.use_prompt(get_prompt("amem"))
    system.ingest(history())
    system.answer(questions()["single-hop"])
    last = answer_calls(llm)[-1]
    assert last["messages"][0] == {"role": "system", "content": amem.SYSTEM}
    assert last["messages"][1]["content"].startswith("Based on the context: ") and last["max_new_tokens"] == 64


def test_kv_method_streams_the_prompt_head_and_uses_its_cap():
    from ctxbench.models.loading import load_model

    bundle = load_model(option_config("model", {"name": "tiny"}))
    cfg = option_config("method", {"name": "streamingllm", "positions": "absolute", "segment_len": 32, "mem_size": 64,
                            "max_new_tokens": None})
    m = registry.build("method", cfg, bundle=bundle)
    assert m.answer_max_tokens() == 48  # the default prompt's (brief) until told otherwise
    m.use_prompt(get_prompt("locomo"))
    assert m.answer_max_tokens() == 32
    m.use_prompt(get_prompt("brief"))
    m.ingest(history())
    assert brief.SYSTEM in m._prefix  # the system message is streamed before the history
    pred = m.answer(questions()["single-hop"])
    assert m.answer_max_tokens() == 48 and 0 < pred.usage.answer_completion_tokens <= 48
    _, after = m._frame(questions()["single-hop"], ["Alice", "Bob"])
    assert "Question: What is Bob's dog called?" in after


def test_icae_instruction_follows_the_prompt():
    from ctxbench.methods.icae import qa_text

    q = questions()["single-hop"]
    assert qa_text(q, get_prompt("locomo")) == GOLDEN["before"]["single-hop"]["instruction"].strip()
    assert qa_text(q) == qa_text(q, get_prompt("brief"))  # none given: the default
    assert qa_text(q, get_prompt("brief")).startswith(brief.SYSTEM + "\n\nQuestion: What is Bob's dog called?")


# ---- eval: built once, recorded, guarded ---------------------------------------------------------

def eval_cfg(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name="eval", overrides=list(overrides))


def test_eval_config_default_and_paper_experiments():
    assert eval_cfg().qa_prompt == "brief"
    want = {"mem0_locomo_table1_mem0": "mem0", "mem0_locomo_table1_mem0g": "mem0g",
            "mem0_locomo_table1_memgpt": "mem0", "mem0_locomo_table1_locomo": "locomo",
            "amem_locomo_table1_amem": "amem", "amem_locomo_table1_readagent": "amem",
            "amem_locomo_table1_locomo": "locomo"}
    for exp, prompt in want.items():
        assert eval_cfg(f"experiment={exp}").qa_prompt == prompt, exp


def test_build_system_hands_the_prompt_over(tmp_path, monkeypatch):
    llm = ScriptedLLM("Rex")
    monkeypatch.setattr("ctxbench.evaluation.systems.preflight", lambda llm: None)
    real_build = registry.build
    monkeypatch.setattr(registry, "build", lambda kind, c, **d: llm if kind == "llm" else real_build(kind, c, **d))
    cfg = eval_cfg("memory=no_context", "qa_prompt=amem")
    system, _, _ = build_system(cfg, tmp_path)
    assert system.answer_prompt is get_prompt("amem")
    with pytest.raises(ConfigError, match="qa_prompt='x'"):
        build_system(OmegaConf.merge(cfg, {"qa_prompt": "x"}), tmp_path)


def test_results_json_records_the_prompt_and_cap(tmp_path):
    llm = ScriptedLLM("Rex")
    system = registry.build("memory", memory_cfg("no_context"), llm=llm)
    system.use_prompt(get_prompt("brief"))
    res = evaluate_samples(system, [Sample(history(), [questions()["single-hop"]])], tmp_path, llm=llm)
    rec = json.loads((tmp_path / "results.json").read_text())["qa_prompt"]
    assert rec == res["qa_prompt"]
    assert (rec["name"], rec["version"], rec["source"]) == ("brief", "brief-v1", brief.PROMPT.source)
    assert rec["answer_max_tokens"] == 48 and rec["answer_cap_from"] == "qa_prompt"
    assert rec["postprocess"] == {"first_line": True, "max_chars": 200, "json_field": None}
    assert f"Answer prompt: brief (brief-v1; {brief.PROMPT.source}), at most 48 new tokens." in \
        (tmp_path / "results.md").read_text()


def test_resume_with_another_qa_prompt_is_refused(tmp_path):
    check_config(tmp_path, eval_cfg("memory=no_context"))
    check_config(tmp_path, eval_cfg("memory=no_context"))  # same config: accepted
    with pytest.raises(RunFolderError, match=r"different config: qa_prompt brief → locomo"):
        check_config(tmp_path, eval_cfg("memory=no_context", "qa_prompt=locomo"))


# ---- python -m ctxbench.qa.compare ---------------------------------------------------------------


def test_compare_script_refuses_to_choose_on_held_out_conversations(tmp_path, capsys):
    assert set(cmp.SPLITS["dev"]) == {"conv-26", "conv-30"}
    assert not set(cmp.SPLITS["dev"]) & set(cmp.SPLITS["heldout"]) and len(cmp.SPLITS["heldout"]) == 8
    assert cmp.main(["--split", "heldout", "--choose", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "ctxbench.qa.compare: error: --choose reads the dev split only (conv-26, conv-30); --split heldout "
        "is for reporting the chosen prompt, never for choosing it")
    assert not list(tmp_path.iterdir())  # nothing ran


def test_compare_script_end_to_end_with_a_scripted_llm(tmp_path, monkeypatch):
    """rag, full_context, no_context × locomo, brief on the dev split (1 session, 2 questions each)."""
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
    if not data.exists():
        pytest.skip(f"no {data}")
    seen: list[dict] = []

    def reply(messages, **kw):
        seen.append({"messages": messages, **kw})
        return "Caroline\nand more text" if messages[0]["role"] == "system" else "Caroline"
    llm = ScriptedLLM(reply)
    real_build = registry.build

    def build(kind, c, **deps):
        if kind == "llm":
            return llm
        if kind == "embedder":
            return BowEmbedder()
        return real_build(kind, c, **deps)
    monkeypatch.setattr(registry, "build", build)
    monkeypatch.setattr("ctxbench.evaluation.systems.preflight", lambda llm: None)
    out = tmp_path / "cmp"
    assert cmp.main(["--prompts", "locomo,brief", "--sessions", "1", "--limit", "2", "--choose", "--out", str(out),
                     "--", f"dataset.path={data}", "metrics=[f1]"]) == 0
    report = json.loads((out / "qa_prompts_dev.json").read_text())
    assert report["conversations"] == ["conv-26", "conv-30"] and report["sessions"] == 1
    cells = {(r["system"], r["prompt"]): r for r in report["rows"]}
    assert set(cells) == {(s, p) for s in ("rag", "full_context", "no_context") for p in ("locomo", "brief")}
    for (system, prompt), r in cells.items():
        res = json.loads((Path(r["run"]) / "results.json").read_text())
        assert res["qa_prompt"]["name"] == prompt and res["config"]["qa_prompt"] == prompt
        assert set(res["config"]["dataset"]["conversations"]) == {"conv-26", "conv-30"}
        assert r["overall"]["n"] == 4 and "f1_stderr" in r["overall"]
        preds = [json.loads(x) for x in (Path(r["run"]) / "predictions.jsonl").read_text().splitlines()]
        assert all(p["prediction"] == "Caroline" for p in preds)  # brief: its first line
        if prompt == "brief":  # its answer call stops at the first line break (stop=["\\n"])
            assert all(p["raw_prediction"] == "Caroline" for p in preds)
    answers = [s for s in seen if s["phase"] == "answer"]
    assert {s["max_new_tokens"] for s in answers} == {32, 48}
    assert report["choice"]["chosen"] in ("locomo", "brief")
    md = (out / "qa_prompts_dev.md").read_text()
    assert "| brief (brief-v1) | rag |" in md and "±" in md


def test_compare_script_chooses_on_categories_1_to_4_not_on_adversarial():
    """A prompt that wins overall only through adversarial refusals is not chosen."""

    def row(prompt, answerable_f1, adversarial_f1):
        cats = {c: {"n": 10, "f1": answerable_f1, "f1_stderr": 0.02} for c in cmp.ANSWERABLE}
        cats["adversarial"] = {"n": 40, "f1": adversarial_f1, "f1_stderr": 0.05}
        overall = (40 * answerable_f1 + 40 * adversarial_f1) / 80
        return {"system": "rag", "prompt": prompt, "overall": {"n": 80, "f1": overall},
                "answerable": cmp.pooled(cats), "by_category": cats}
    rows = [row("refuser", 0.10, 0.90), row("answerer", 0.20, 0.30)]
    assert rows[0]["overall"]["f1"] > rows[1]["overall"]["f1"]
    assert cmp.choose(rows, ["refuser", "answerer"]) == {"chosen": "answerer",
                                                         "mean_f1": {"refuser": 0.1, "answerer": 0.2}}
    assert rows[1]["answerable"] == {"n": 40, "f1": 0.2, "f1_stderr": 0.01}  # sqrt(4·(10·0.02)²)/40


def test_the_default_is_the_prompt_chosen_on_the_dev_split_in_the_registry_and_in_eval_yaml():
    """brief won on dev (conv-26, conv-30): one default, the same in code and in the composed config."""
    from omegaconf import OmegaConf

    from ctxbench.qa.registry import DEFAULT

    assert DEFAULT == "brief" and get_prompt(None) is get_prompt("brief")
    assert load_conf_file(ROOT / "conf" / "eval.yaml").qa_prompt == DEFAULT
