"""``mem0``: Mem0's ACCURACY_PROMPT, the judge of the Mem0 paper's J (ctxbench's ``llm_judge`` since it began).

Source: mem0ai/mem0 ``evaluation/metrics/llm_judge.py`` ``ACCURACY_PROMPT`` and ``evaluate_llm_judge``
(read at 49f8e9895da1, the last commit holding the file): one user message
``ACCURACY_PROMPT.format(question=, gold_answer=, generated_answer=)``, gpt-4o-mini, temperature 0,
``response_format={"type": "json_object"}``; the label is ``json.loads(extract_json(reply))["label"]``,
1 if it is exactly ``CORRECT`` else 0.

The text is ctxbench's since ``mem0-judge-1``, kept byte for byte so J and its call-cache keys keep
their meaning. It differs from the source in three typographic ways that do not change the
instruction: the source's curly quotes (’CORRECT’) are straight, its trailing spaces after four lines
are gone, and its leading newline is dropped. The call sends a JSON schema ``{"label": CORRECT|WRONG}``
(enforced by backends that can; the source asks for a JSON object) and 128 new tokens (the source:
no cap). The parse is more forgiving than the source's (a reply without JSON that names exactly one of
the two words counts; the source would raise), and a reply naming neither is unscored, not WRONG.
"""
from __future__ import annotations

import json
import re

from ctxbench.core.registry import register
from ctxbench.llm import schema
from ctxbench.metrics.judges.prompt import JudgePrompt, label_word_or_json, user_only

ACCURACY_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
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

def source_parse(text: str) -> int | None:
    """mem0's own reading (``evaluate_llm_judge``): ``json.loads(extract_json(reply))["label"]``, 1 if it is
    exactly ``CORRECT`` (case-sensitive: ``correct`` is 0), else 0; a reply without that JSON, where the
    source raises, is None (counted WRONG in J as a failed judge call). ``extract_json`` takes a fenced
    block's inside, else the stripped reply."""
    body = (text or "").strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    try:
        label = json.loads(fenced.group(1) if fenced else body)["label"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    return int(label == "CORRECT")


LABEL_SCHEMA = schema.obj(label=schema.enum(["CORRECT", "WRONG"]))  # the prompt's {"label": ...}, enforced

JUDGE = register("judge", "mem0")(JudgePrompt(
    name="mem0", version="mem0-judge-2",
    source="mem0ai/mem0@49f8e9895da1 evaluation/metrics/llm_judge.py (ACCURACY_PROMPT, evaluate_llm_judge)",
    render=user_only(ACCURACY_PROMPT), parse=label_word_or_json,
    label_format='{"label": "CORRECT"|"WRONG"}; else the one of CORRECT / WRONG the reply names',
    examples=(('{"label": "CORRECT"}', 1), ('Same topic. {"label": "WRONG"}', 0), ("CORRECT", 1),
              ("correct, not wrong", None), ("no idea", None)),
    max_new_tokens=128, json_mode=True, schema=LABEL_SCHEMA,
    decoding="gpt-4o-mini, temperature 0, response_format json_object, one call per answer (the paper: 10 runs)",
    notes="straight quotes, no trailing spaces, no leading newline; JSON schema; 128 new tokens; forgiving parse "
          "(judge.parse=source: mem0's case-sensitive one)",
    source_parse=source_parse,
))
