"""``longmemeval``: LongMemEval's per-question-type answer check.

Source: xiaowu0162/LongMemEval@9e0b455f4ef0 ``src/evaluation/evaluate_qa.py`` ``get_anscheck_prompt``:
one user message, a template per question type (the first three types share one), filled with
``str.format(question, answer, response)``; gpt-4o(-mini), temperature 0, ``max_tokens=10``; the label
is ``'yes' in reply.lower()`` (1, else 0: a reply never goes unscored).

LoCoMo questions have no LongMemEval type; each LoCoMo category takes the closest template
(:data:`LOCOMO_TYPE`): multi-hop → ``multi-session`` (the answer joins several sessions), temporal →
``temporal-reasoning`` (its extra rule: off-by-one day counts are not penalised), open-domain and
single-hop → ``single-session-user`` (the generic check; open-domain's commonsense answers have no
type of their own), adversarial → the abstention template (unanswerable questions; unused on LoCoMo
since adversarial questions are not judged). A LongMemEval question type (a dataset that carries
them as its category names) picks its own template; an abstention question (id ending ``_abs``) is
given the ``abstention`` type by :meth:`ctxbench.metrics.judge.LLMJudge.score_runs`, which picks the
abstention template. ``knowledge-update`` and
``single-session-preference`` keep their templates for such datasets.
"""
from __future__ import annotations

from ctxbench.core.registry import register
from ctxbench.metrics.judges.prompt import JudgePrompt, Message

_HEAD = ("I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
         "response contains the correct answer. Otherwise, answer no. ")
_STEPS = ("If the response is equivalent to the correct answer or contains all the intermediate steps to get the "
          "correct answer, you should also answer yes. If the response only contains a subset of the information "
          "required by the answer, answer no. ")
_TAIL = "\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only."

TEMPLATES = {
    "single-session-user": _HEAD + _STEPS + _TAIL,
    "temporal-reasoning": _HEAD + _STEPS + (
        "In addition, do not penalize off-by-one errors for the number of days. If the question asks for the "
        "number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19 days when "
        "the answer is 18), the model's response is still correct. ") + _TAIL,
    "knowledge-update": _HEAD + (
        "If the response contains some previous information along with an updated answer, the response should be "
        "considered as correct as long as the updated answer is the required answer.") + _TAIL,
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response from a model. "
        "Please answer yes if the response satisfies the desired response. Otherwise, answer no. The model does not "
        "need to reflect all the points in the rubric. The response is correct as long as it recalls and utilizes "
        "the user's personal information correctly.\n\nQuestion: {}\n\nRubric: {}\n\nModel Response: {}\n\n"
        "Is the model response correct? Answer yes or no only."),
    "abstention": (
        "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes "
        "if the model correctly identifies the question as unanswerable. The model could say that the information "
        "is incomplete, or some other information is given but the asked information is not.\n\nQuestion: {}\n\n"
        "Explanation: {}\n\nModel Response: {}\n\nDoes the model correctly identify the question as unanswerable? "
        "Answer yes or no only."),
}
TEMPLATES["single-session-assistant"] = TEMPLATES["multi-session"] = TEMPLATES["single-session-user"]

LOCOMO_TYPE = {"multi-hop": "multi-session", "temporal": "temporal-reasoning", "open-domain": "single-session-user",
               "single-hop": "single-session-user", "adversarial": "abstention"}


def question_type(category: str) -> str:
    """The LongMemEval type whose template judges a question of this category (see the module docstring)."""
    if category in TEMPLATES:
        return category
    return LOCOMO_TYPE.get(category, "single-session-user")


def render(question: str, gold: str, answer: str, question_type_: str = "") -> list[Message]:
    return [{"role": "user", "content": TEMPLATES[question_type(question_type_)].format(question, gold, answer)}]


def parse(text: str) -> int | None:
    """The source's check: ``'yes' in reply.lower()``."""
    return int("yes" in (text or "").lower())


JUDGE = register("judge", "longmemeval")(JudgePrompt(
    name="longmemeval", version="longmemeval-judge-1",
    source="xiaowu0162/LongMemEval@9e0b455f4ef0 src/evaluation/evaluate_qa.py (get_anscheck_prompt)",
    render=render, parse=parse,
    label_format="yes / no; 'yes' anywhere in the reply (any case) = correct",
    examples=(("Yes", 1), ("yes.", 1), ("No", 0), ("Not sure", 0), ("", 0)),
    max_new_tokens=10, json_mode=False, schema=None,
    decoding="gpt-4o-2024-08-06 (or gpt-4o-mini / llama-3.1-70b), temperature 0, max_tokens 10, n 1",
    notes="LoCoMo categories mapped to LongMemEval question types (LOCOMO_TYPE)",
))
