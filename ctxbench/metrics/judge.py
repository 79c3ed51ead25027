"""``llm_judge``: the J score of the Mem0 paper (an LLM labels each answer CORRECT or WRONG).

Prompt after mem0ai/mem0 ``evaluation/metrics/llm_judge.py`` (ACCURACY_PROMPT); like that code,
adversarial questions are not judged (score ``None``, excluded from the mean). Off by default:
add ``llm_judge`` to ``metrics`` and pick the judge with ``llm=...``.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..llm import schema
from ..registry import register
from ..types import Question
from .base import answer_text, category_name

JUDGE_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""


def parse_label(text: str) -> int | None:
    """1 for CORRECT, 0 for WRONG, None if the reply names neither (or both)."""
    m = re.search(r"\{.*\}", text, flags=re.S)
    if m:
        try:
            label = str(json.loads(m.group(0)).get("label", "")).strip().upper()
            if label in ("CORRECT", "WRONG"):
                return int(label == "CORRECT")
        except (json.JSONDecodeError, AttributeError):
            pass
    up = text.upper()
    has_c, has_w = "CORRECT" in up, "WRONG" in up
    if has_c != has_w:
        return int(has_c)
    return None


LABEL_SCHEMA = schema.obj(label=schema.enum(["CORRECT", "WRONG"]))  # the prompt's {"label": ...}, enforced


@register("metric", "llm_judge")
class LLMJudge:
    name = "llm_judge"
    version = "mem0-judge-2"
    reference = "mem0ai/mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT"
    needs_llm = True

    def __init__(self, llm: Any, max_new_tokens: int = 128):
        self.llm = llm
        self.max_new_tokens = max_new_tokens

    def score(self, prediction: str, question: Question) -> float | None:
        if category_name(question) == "adversarial":
            return None
        prompt = JUDGE_PROMPT.format(question=question.question, gold_answer=answer_text(question.answer),
                                     generated_answer=prediction)
        r = self.llm.chat([{"role": "user", "content": prompt}], max_new_tokens=self.max_new_tokens,
                          temperature=0.0, phase="judge", json_mode=True, schema=LABEL_SCHEMA)
        if r.failed:
            return None
        label = parse_label(r.text)
        return None if label is None else float(label)
