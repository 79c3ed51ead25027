"""``zep``: Zep's LoCoMo grader (the judge behind Zep's published LoCoMo score).

Source: getzep/zep-papers@4b7f26cc76cc ``kg_architecture_agent_memory/locomo_eval/zep_locomo_eval.py``
``locomo_grader``: a system message and a user message (``ACCURACY_PROMPT``, an f-string inside the
function, so its 4- and 8-space indentation, its trailing spaces, its curly quotes and its typo
"You williolw23 be given" are part of the text sent), gpt-4o-mini, temperature 0, structured output
``Grade(is_correct: str "CORRECT or WRONG", reasoning: str)`` through ``beta.chat.completions.parse``;
the label is ``grade.is_correct.strip().lower() == 'correct'`` (1, else 0).

Kept as sent, character for character (the user text below is the f-string's value with
``{response}`` named ``{generated_answer}``; values are substituted, never re-parsed). The call sends
the Grade schema with ``is_correct`` as an enum of CORRECT / WRONG (the source: a free string described
as "CORRECT or WRONG") and ``reasoning`` capped at 400 characters, in the source's key order (label
first), and 256 new tokens (the source: no cap). A reply that is not a JSON object with ``is_correct``
is unscored (the source's parse would raise).
"""
from __future__ import annotations

import json
import re

from ctxbench.core.registry import register
from ctxbench.llm import schema
from ctxbench.metrics.judges.prompt import JudgePrompt, Message

SYSTEM_PROMPT = "\n        You are an expert grader that determines if answers to questions match a gold standard answer\n        "

ACCURACY_PROMPT = "\n".join((  # the source's lines, trailing spaces kept
    '',
    '    Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You williolw23 be given the following data:',
    '        (1) a question (posed by one user to another user), ',
    '        (2) a ’gold’ (ground truth) answer, ',
    '        (3) a generated answer',
    '    which you will score as CORRECT/WRONG.',
    '',
    '    The point of the question is to ask about something one user should know about the other user based on their prior conversations.',
    '    The gold answer will usually be a concise and short answer that includes the referenced topic, for example:',
    '    Question: Do you remember what I got the last time I went to Hawaii?',
    '    Gold answer: A shell necklace',
    '    The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT. ',
    '',
    '    For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it\'s the same date.',
    '',
    '    Now it’s time for the real question:',
    '    Question: {question}',
    '    Gold answer: {gold_answer}',
    '    Generated answer: {generated_answer}',
    '',
    '    First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. ',
    '    Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.',
    '',
    '    Just return the label CORRECT or WRONG in a json format with the key as "label".',
    '    ',
))

GRADE_SCHEMA = schema.obj(is_correct=schema.enum(["CORRECT", "WRONG"]), reasoning=schema.text(400, min_chars=0))


def render(question: str, gold: str, answer: str, question_type: str = "") -> list[Message]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": ACCURACY_PROMPT.format(question=question, gold_answer=gold,
                                                               generated_answer=answer)}]


def parse(text: str) -> int | None:
    """``is_correct`` of the reply's JSON object, ``strip().lower() == 'correct'``; None without one."""
    m = re.search(r"\{.*\}", text or "", flags=re.S)
    if not m:
        return None
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("is_correct"), str):
        return None
    return int(obj["is_correct"].strip().lower() == "correct")


JUDGE = register("judge", "zep")(JudgePrompt(
    name="zep", version="zep-judge-1",
    source="getzep/zep-papers@4b7f26cc76cc kg_architecture_agent_memory/locomo_eval/zep_locomo_eval.py (locomo_grader)",
    render=render, parse=parse,
    label_format='{"is_correct": "CORRECT"|"WRONG", "reasoning": "..."}; is_correct.strip().lower() == "correct"',
    examples=(('{"is_correct": "CORRECT", "reasoning": "same date"}', 1),
              ('{"is_correct": " correct ", "reasoning": ""}', 1),
              ('{"is_correct": "WRONG", "reasoning": "other city"}', 0),
              ('{"is_correct": "partly", "reasoning": ""}', 0), ("CORRECT", None)),
    max_new_tokens=256, json_mode=True, schema=GRADE_SCHEMA,
    decoding="gpt-4o-mini, temperature 0, structured output Grade(is_correct, reasoning), one call per answer",
    notes="is_correct enum and reasoning capped at 400 characters in the schema; 256 new tokens; no JSON = unscored",
))
