"""``strict``: ctxbench's own judge — the exact fact or date, no credit for vagueness or hedging.

Written for ctxbench (no outside source). Where Mem0's prompt asks the judge to be generous ("as long
as it touches on the same topic"), this one asks whether the generated answer commits to the gold
fact: the same entity, number, date or event, in any wording or date format, with any extra context
that does not contradict it. A different (even a nearby) date, a different entity, an answer on the
topic that does not state the fact, a hedge between options, or only part of a list is WRONG. The
label format and its parse are Mem0's (``{"label": "CORRECT"|"WRONG"}``, :func:`.prompt.label_word_or_json`),
so the two judges differ only in the instruction; 64 new tokens (the reply is a label).
"""
from __future__ import annotations

from ctxbench.core.registry import register
from ctxbench.metrics.judges.mem0 import LABEL_SCHEMA
from ctxbench.metrics.judges.prompt import JudgePrompt, label_word_or_json, user_only

STRICT_PROMPT = """Your task is to decide whether a generated answer states the same fact as the gold (ground truth) answer to a question about a conversation. Label it 'CORRECT' or 'WRONG'.

Label it CORRECT only if the generated answer commits to the fact of the gold answer: the same person, thing, place, number, date or event. Different wording, word order, letter case, a different date format (e.g. "7 May 2023" and "May 7, 2023") and extra context that does not contradict the gold answer are fine.

Label it WRONG if any of these holds:
- it names a different person, thing, place or number than the gold answer;
- it gives a different date, day, week, month or year than the gold answer, even a close one;
- it is vague: it is about the topic of the question but does not state the gold fact;
- it hedges or is unsure (for example "maybe", "I'm not sure", "either X or Y"), even if one option is right;
- the gold answer lists several items and the generated answer gives only some of them.

Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

Return only the label in a json format with the key as "label": {{"label": "CORRECT"}} or {{"label": "WRONG"}}.
"""

JUDGE = register("judge", "strict")(JudgePrompt(
    name="strict", version="strict-judge-1",
    source="ctxbench (ctxbench/metrics/judges/strict.py STRICT_PROMPT)",
    render=user_only(STRICT_PROMPT), parse=label_word_or_json,
    label_format='{"label": "CORRECT"|"WRONG"}; else the one of CORRECT / WRONG the reply names',
    examples=(('{"label": "CORRECT"}', 1), ('{"label": "WRONG"}', 0), ("WRONG", 0), ("?", None)),
    max_new_tokens=64, json_mode=True, schema=LABEL_SCHEMA,
    decoding="any chat model; ctxbench's judge.temperature (default 0)",
))
