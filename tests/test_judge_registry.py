"""The judge registry (ctxbench/metrics/judges/): every judge has a source, a version, a label format and a
parse that reads its own examples; each judge's rendered text is pinned (a change to a prompt must bump
its version and this pin); the mem0 judge is byte for byte ctxbench's J prompt before the registry."""
from __future__ import annotations

import hashlib
import json

import pytest

from ctxbench.core import registry
from ctxbench.core.errors import ConfigError
from ctxbench.metrics.judge import JUDGE_PROMPT, LLMJudge, get_judge
from ctxbench.metrics.judges import longmemeval
from ctxbench.metrics.judges.prompt import JudgePrompt

JUDGES = ["evermemos", "longmemeval", "mem0", "strict", "zep"]

# (version, sha256 of json.dumps(messages) for the question below): update both together. The zep,
# evermemos and longmemeval texts were checked equal to their sources' when pinned (see each module).
PINNED = {
    "mem0": ("mem0-judge-2", "03b44e290797fdafc5b12b8237776d8c7bfa14af2e216c6303fbace947d345e4"),
    "zep": ("zep-judge-1", "d147fbda392ba7bdb77dcfaa2ca476e8028092ee4884512d49edc45c9bc9a8fb"),
    "evermemos": ("evermemos-judge-2", "6c5f6779f3d2b374be4388daadac5b8c88ccca5ae6a2130c96647c09f9543f32"),
    "longmemeval": ("longmemeval-judge-1", "4c28ab283b271c93b95778c265381c93a1e2c420e1dc1199a3d8d819d39ad234"),
    "strict": ("strict-judge-1", "d2c3aef4286e830dfb55c4052e2114595681726a682fcb18b1684554fb7d056a"),
}
Q, GOLD, ANSWER = "When did Ava run the half marathon?", "14 April 2024", "On April 14, 2024."


def digest(name: str, category: str = "temporal") -> str:
    msgs = registry.get("judge", name).messages(Q, GOLD, ANSWER, category)
    return hashlib.sha256(json.dumps(msgs, ensure_ascii=False).encode()).hexdigest()


def test_the_registry_holds_the_five_judges():
    assert registry.names("judge") == JUDGES
    assert set(PINNED) == set(JUDGES)


@pytest.mark.parametrize("name", JUDGES)
def test_every_judge_has_source_version_format_and_parses_its_examples(name):
    j = registry.get("judge", name)
    assert isinstance(j, JudgePrompt) and j.name == name
    assert j.version == PINNED[name][0]
    assert j.source and j.label_format and j.decoding and j.max_new_tokens > 0
    if name != "strict":  # ours; every other one names the repository and file it was read from
        assert "/" in j.source and "@" in j.source or "via" in j.source
    assert len(j.examples) >= 3 and {lab for _, lab in j.examples} >= {0, 1}
    for reply, label in j.examples:
        assert j.parse(reply) == label, (name, reply)
    msgs = j.messages(Q, GOLD, ANSWER, "temporal")
    assert msgs[-1]["role"] == "user" and Q in msgs[-1]["content"] and GOLD in msgs[-1]["content"]
    assert ANSWER in msgs[-1]["content"]
    assert j.record()["prompt_version"] == j.version


def test_the_prompts_are_pinned():
    got = {n: digest(n) for n in JUDGES}
    assert len(set(got.values())) == len(JUDGES)  # five different texts: five different cache keys
    assert got == {n: PINNED[n][1] for n in JUDGES}


def test_mem0_is_todays_prompt_and_call():
    j = registry.get("judge", "mem0")
    assert j.messages("Q", "G", "A") == [{"role": "user", "content": JUDGE_PROMPT.format(
        question="Q", gold_answer="G", generated_answer="A")}]
    assert JUDGE_PROMPT.startswith("Your task is to label an answer") and "generous" in JUDGE_PROMPT
    assert j.json_mode and j.schema is not None and j.max_new_tokens == 128


def test_zep_keeps_the_source_text_with_its_typo_and_system_message():
    msgs = registry.get("judge", "zep").messages("Q", "G", "A")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "williolw23" in msgs[1]["content"] and "’CORRECT’" in msgs[1]["content"]
    assert "Generated answer: A" in msgs[1]["content"]


def test_evermemos_renders_as_evermemos_format_prompt():
    """EverMemOS evaluation/src/utils/prompts.py: get_prompt strips the YAML block, format_prompt fills it with
    str.format. str.format never re-reads what it substituted: a question holding a later placeholder keeps it
    (the chained str.replace of locomo-audit's port, ctxbench's before issue 54, put the gold answer there).
    Braces in the values are kept either way (str.format does not choke on them: only the template is parsed)."""
    from ctxbench.metrics.judges.evermemos import SYSTEM_PROMPT, USER_PROMPT

    msgs = registry.get("judge", "evermemos").messages("Did {golden_answer} happen?", "G", "A {question} {x}")
    assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT.strip()}
    assert msgs[1]["content"] == USER_PROMPT.strip().format(question="Did {golden_answer} happen?", golden_answer="G",
                                                            generated_answer="A {question} {x}")
    assert "Question: Did {golden_answer} happen?" in msgs[1]["content"]  # str.replace gave "Did G happen?"
    assert "Generated answer: A {question} {x}" in msgs[1]["content"]
    assert not msgs[1]["content"].endswith("\n")  # the block as get_prompt returns it: stripped


@pytest.mark.parametrize("category,template", [("temporal", "temporal-reasoning"), ("multi-hop", "multi-session"),
                                               ("single-hop", "single-session-user"),
                                               ("open-domain", "single-session-user"),
                                               ("knowledge-update", "knowledge-update")])
def test_longmemeval_maps_categories_to_its_question_types(category, template):
    assert longmemeval.question_type(category) == template
    text = longmemeval.render("Q", "G", "A", category)[0]["content"]
    assert text == longmemeval.TEMPLATES[template].format("Q", "G", "A")
    assert ("off-by-one" in text) == (template == "temporal-reasoning")


def test_an_unknown_judge_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"judge.panel: unknown judge 'zepp'.*Did you mean 'zep'"):
        get_judge("zepp")
    with pytest.raises(ConfigError, match="judge.panel"):
        LLMJudge(llm=object(), judge="nope")


def test_mem0_source_parse_is_case_sensitive_as_mem0s_evaluate_llm_judge():
    """mem0's evaluate_llm_judge: json.loads(extract_json(reply))["label"] == "CORRECT" (case-sensitive; a reply
    without that JSON raises). judge.parse=source reads replies that way; ctxbench's parse is more forgiving."""
    from ctxbench.metrics.judge import LLMJudge

    j = registry.get("judge", "mem0")
    for reply, ours, theirs in (('{"label": "CORRECT"}', 1, 1), ('{"label": "correct"}', 1, 0),
                                ('```json\n{"label": "CORRECT"}\n```', 1, 1), ("CORRECT", 1, None),
                                ('{"label": "WRONG"}', 0, 0)):
        assert (j.parse(reply), j.source_parse(reply)) == (ours, theirs), reply

    class Reply:
        model_name = "scripted"

        def chat(self, messages, **kw):
            from ctxbench.llm.base import ChatResult
            return ChatResult('{"label": "correct"}', 10, 3)

    from ctxbench.core.types import Question

    q = Question(id="q", question="Q?", answer="G", category=1)
    assert LLMJudge(Reply()).score("A", q) == 1.0
    strict = LLMJudge(Reply(), parse="source")
    assert strict.score("A", q) == 0.0 and strict.settings()["parse"] == "source"
