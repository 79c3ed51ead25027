"""LoCoMo's reference answer prompt (ctxbench's prompt before the registry, byte for byte).

Source: snap-research/locomo ``task_eval/evaluate_gpts.py`` (``CONV_START_PROMPT``, ``QA_PROMPT``,
``QA_PROMPT_CAT_5``; single-question mode, one user message, no system message, 32 new tokens).
The rendering lives in :mod:`ctxbench.qa.forms` (its docstring lists what it keeps and changes).
"""
from __future__ import annotations

from ctxbench.qa.forms import ADVERSARIAL_FORM, TEMPORAL_HINT, qa_instruction, qa_prompt
from ctxbench.qa.prompt import AnswerPrompt

PROMPT = AnswerPrompt(
    name="locomo", version="locomo-v1",
    source="snap-research/locomo task_eval/evaluate_gpts.py (CONV_START_PROMPT, QA_PROMPT, QA_PROMPT_CAT_5)",
    user=lambda q, context, speakers: qa_prompt(q, context, speakers),
    instruction=qa_instruction,
    temporal_hint=TEMPORAL_HINT, adversarial_form=ADVERSARIAL_FORM,
    max_new_tokens=32,
    notes="the adversarial option order is a stable hash of the question id (the reference: random.random()).",
)
