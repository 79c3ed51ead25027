"""RULER's answer prompt (``qa_prompt=ruler``): the context, the question, and the answer prefix starting the reply.

Source: NVIDIA/RULER ``scripts/data/synthetic/constants.py`` (each task's ``template`` and
``answer_prefix``), as NVIDIA/kvpress ``evaluation/benchmarks/ruler`` splits it: one user message
"<context>\\n<question>" (the context is the instruction + haystack, ``dataset=ruler``'s history text),
no system message, and the answer prefix (``question.meta["answer_prefix"]``, e.g. "The special magic
number for X mentioned in the provided text is") as the start of the assistant's turn, which the model
continues (:attr:`ctxbench.qa.prompt.AnswerPrompt.reply_prefix`). Measured when issue 39 was planned: SmolLM2-135M answers NIAH
single at 1k and 2k tokens 10/10 with the prefix in its turn and 0/10 without it (it parrots the prefix).

The reply is kept whole (answers are lists: no first-line cut). Cap: 64 new tokens for every task — the
prompt has one cap, and the longest answers (cwe's ten numbered words, niah_multivalue's four 7-digit
numbers) fit in 64 SmolLM2 tokens; RULER allows 128 (niah) / 30 (vt) / 120 (cwe) / 50 (fwe), which
``dataset.answer_tokens=ruler`` restores per question (``meta["max_new_tokens"]``, honoured by
:meth:`ctxbench.core.system.System.answer_max_tokens`).
The prefix loses its leading space (RULER's text follows the question on one line; here it opens a turn).
"""
from __future__ import annotations

from ctxbench.core.types import Question
from ctxbench.qa.prompt import AnswerPrompt


def user(question: Question, context: str, speakers: list[str]) -> str:
    """"<context>\\n<question>" (the question alone when there is no context; the context alone when the
    question is empty: ``task.query_aware=true`` put it at the context's end, as kvpress's compress_questions)."""
    if not question.question:
        return context
    return f"{context}\n{question.question}" if context else question.question


def reply_prefix(question: Question) -> str:
    """RULER's answer prefix for ``question`` (``meta["answer_prefix"]``), stripped; "" for a question without one."""
    return str((question.meta or {}).get("answer_prefix") or "").strip()


PROMPT = AnswerPrompt(
    name="ruler", version="ruler-v1",
    source="NVIDIA/RULER scripts/data/synthetic/constants.py (template, answer_prefix), split as NVIDIA/kvpress "
           "evaluation/benchmarks/ruler",
    user=user, instruction=lambda q: "\n" + q.question, reply_prefix=reply_prefix,
    max_new_tokens=64,
    notes="the answer prefix opens the assistant's turn (RULER's raw-text input has it after the question)",
)
