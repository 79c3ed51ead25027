"""LongMemEval's reader prompt (``qa_prompt=longmemeval``): the history chats, the current date, the question.

Source: xiaowu0162/LongMemEval ``src/generation/run_generation.py`` ``prepare_prompt`` (the template without
chain-of-note or fact expansion, ``cot=false``): one user message, no system message, greedy decoding —
an introduction ("I will give you several history chats between you and a user ..."), "History Chats:"
and the history, then ``Current Date: <question_date>``, ``Question: <question>`` and ``Answer:``.
ctxbench's changes: the history is ctxbench's one rendering (:func:`ctxbench.core.render.render_history`,
or the memories a system retrieved), not LongMemEval's "### Session N / Session Date / Session Content"
blocks; 64 new tokens (the source: 500); a question without a date (LoCoMo's) has no ``Current Date`` line;
with no context (``no_context``, LongMemEval's ``no-retrieval``) the question part alone is sent; questions
with options list them (:func:`ctxbench.qa.forms.question_text`). The reply is kept whole.
"""
from __future__ import annotations

from ctxbench.core.types import Question
from ctxbench.qa.forms import question_date, question_text
from ctxbench.qa.prompt import AnswerPrompt

INTRO = ("I will give you several history chats between you and a user. Please answer the question based on "
         "the relevant chat history.\n\n\nHistory Chats:\n\n")


def instruction(question: Question) -> str:
    """``Current Date: <date>`` (when the question has one), ``Question: <question>``, ``Answer:``."""
    date = question_date(question)
    head = f"Current Date: {date}\n" if date else ""
    return f"\n\n{head}Question: {question_text(question, dated=False)}\nAnswer:"


def user(question: Question, context: str, speakers: list[str]) -> str:
    """The introduction and the history, then :func:`instruction` (that alone without a context)."""
    return INTRO + context + instruction(question) if context else instruction(question).lstrip("\n")


PROMPT = AnswerPrompt(
    name="longmemeval", version="longmemeval-v1",
    source="xiaowu0162/LongMemEval src/generation/run_generation.py prepare_prompt (cot=false, no fact expansion)",
    user=user, instruction=instruction,
    max_new_tokens=64,
    notes="ctxbench's history rendering; 64 new tokens (source 500); no Current Date line for an undated question",
)
