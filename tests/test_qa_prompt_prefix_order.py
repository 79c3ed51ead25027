"""Every answer prompt puts the shared part first: the questions of one history, sent with the same
context, share the whole prefix up to the question — what a server's automatic prefix caching
(vLLM, llama.cpp) and ``llm=hf``'s prefix reuse need."""
from __future__ import annotations

import json

import pytest

from ctxbench.qa.registry import PROMPTS
from ctxbench.core.types import Question

CONTEXT = "DATE: 8 May, 2023\nCONVERSATION:\nAnn said: \"I adopted a dog named Rex.\"\nBob said: \"Nice!\""


def serialized(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


#: A-Mem's source prompt opens with per-category text before the context (test_advanced.py): its
#: questions share the prefix within a category only.
PER_CATEGORY_HEAD = {"amem"}


@pytest.mark.parametrize("name", sorted(PROMPTS))
@pytest.mark.parametrize("categories", [(4, 4), (4, 2), (1, 3)])
def test_two_questions_share_everything_up_to_the_question(name, categories):
    if name in PER_CATEGORY_HEAD and categories[0] != categories[1]:
        pytest.skip(f"qa_prompt={name} heads each category with its own text, as its source does")
    prompt = PROMPTS[name]
    q1 = Question("a", "What is the name of Ann's dog?", "Rex", category=categories[0])
    q2 = Question("b", "When did Ann adopt a dog?", "May 2023", category=categories[1])
    m1, m2 = (serialized(prompt.messages(q, CONTEXT, ["Ann", "Bob"])) for q in (q1, q2))
    shared = 0
    while shared < min(len(m1), len(m2)) and m1[shared] == m2[shared]:
        shared += 1
    # the context (as serialized) ends inside the shared prefix: only the question part differs
    end = m1.index(json.dumps(CONTEXT, ensure_ascii=False)[1:-1]) + len(json.dumps(CONTEXT, ensure_ascii=False)[1:-1])
    assert end <= shared, f"qa_prompt={name}: the prompts diverge at {shared}, before the context ends at {end}"
