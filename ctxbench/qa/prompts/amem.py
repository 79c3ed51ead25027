"""A-Mem's LoCoMo answer prompts, one per category.

Source: WujiangXu/A-mem ``test_advanced.py`` ``advancedMemAgent.answer_question`` (per-category
``user_prompt`` f-strings, their 28-space continuation indentation and trailing spaces kept), sent by
``memory_layer.py`` ``OpenAIController.get_completion`` with the system message "You must respond
with a JSON object." and a JSON schema ``{"answer": string}``; the reply's ``answer`` field is the
prediction (``json.loads(prediction)["answer"]``, the raw reply when it does not parse).

Categories by LoCoMo's ids as A-Mem reads them: 5 adversarial ("Select the correct answer: X or Y"),
2 temporal (approximate date, shortest answer), 3 open-domain, and the rest (1 multi-hop, 4
single-hop) the same short-phrase text without the leading line break. ctxbench changes: greedy
decoding (the source: temperature 0.7, 0.5 for category 5); the two options' order is ctxbench's
stable one (:func:`ctxbench.qa.forms.adversarial_options`; the source: ``random.random()``); 64 new
tokens (the source: ``max_tokens=1000``); no JSON schema is enforced on the answer call (the
post-processing reads the ``answer`` field when the reply is JSON). Non-LoCoMo questions take the
default text with ctxbench's question text (options listed).
"""
from __future__ import annotations

from ctxbench.data.categories import question_category as category_name
from ctxbench.qa.forms import adversarial_options, prompt_style, question_text, with_date
from ctxbench.core.types import Question
from ctxbench.qa.prompt import AnswerPrompt

SYSTEM = "You must respond with a JSON object."
IND = " " * 28  # the source's continuation indentation
SHORT_PHRASE = ("Based on the context: {context}, write an answer in the form of a short phrase for the "
                "following question. Answer with exact words from the context whenever possible.\n\n"
                + IND + "Question: {question} Short answer:\n" + IND)
ADVERSARIAL = ("\n" + IND + "Based on the context: {context}, answer the following question. {question} \n"
               + IND + "\n" + IND + "Select the correct answer: {a} or {b}  Short answer:\n" + IND)
TEMPORAL = ("\n" + IND + "Based on the context: {context}, answer the following question. Use DATE of "
            "CONVERSATION to answer with an approximate date.\n" + IND + "Please generate the shortest "
            "possible answer, using words from the conversation where possible, and avoid using any "
            "subjects.   \n\n" + IND + "Question: {question} Short answer:\n" + IND)
OPEN_DOMAIN = "\n" + IND + SHORT_PHRASE


def user(question: Question, context: str, speakers: list[str]) -> str:
    """The category's prompt with ``context`` and the question."""
    cat = category_name(question) if prompt_style(question) == "locomo" else ""
    if cat == "adversarial":
        opts = adversarial_options(question)
        if opts:
            return ADVERSARIAL.format(context=context, question=with_date(question, question.question), a=opts["a"],
                                      b=opts["b"])
    if cat == "temporal":
        return TEMPORAL.format(context=context, question=with_date(question, question.question))
    template = OPEN_DOMAIN if cat == "open-domain" else SHORT_PHRASE
    text = with_date(question, question.question) if cat else question_text(question)
    return template.format(context=context, question=text)


PROMPT = AnswerPrompt(
    name="amem", version="amem-v1",
    source="WujiangXu/A-mem test_advanced.py advancedMemAgent.answer_question (+ memory_layer.py get_completion)",
    user=user, instruction=lambda q: user(q, "", []), system=SYSTEM,
    temporal_hint="Use DATE of CONVERSATION to answer with an approximate date.",
    adversarial_form="Select the correct answer: {a} or {b}  Short answer:",
    max_new_tokens=64, json_field="answer",
    notes="greedy; stable option order; 64 new tokens (source 1000); JSON answer field read, not enforced")
