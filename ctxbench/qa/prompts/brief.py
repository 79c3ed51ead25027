"""A brief-answer prompt for small chat models (issue 22's measured variant).

Source: ctxbench issue 22 (measured on LoCoMo conv-26 sessions 1-5 with SmolLM2-135M: rag F1 0.173
against 0.125 with LoCoMo's prompt). A short system message asks for a brief answer; the user
message holds the history or memories, then the question in ctxbench's question text (temporal
hint, the adversarial two-option form, listed options); 48 new tokens; the reply's first line is
kept and cut to 200 characters; the answer call stops at the first line break (``stop``).
"""
from __future__ import annotations

from ctxbench.qa.forms import ADVERSARIAL_FORM, TEMPORAL_HINT, question_text
from ctxbench.core.types import Question
from ctxbench.qa.prompt import AnswerPrompt

SYSTEM = ("You answer questions about a conversation. Reply with a brief answer: a few words, "
          "on one line, with no explanation.")


def user(question: Question, context: str, speakers: list[str]) -> str:
    """[Conversation: context] + the question."""
    q = f"Question: {question_text(question)}\nAnswer:"
    return f"Conversation:\n{context}\n\n{q}" if context else q


PROMPT = AnswerPrompt(
    name="brief", version="brief-v1", source="ctxbench issue 22 (short system message, first line, 48 tokens)",
    user=user, instruction=lambda q: "\n" + user(q, "", []), system=SYSTEM,
    temporal_hint=TEMPORAL_HINT, adversarial_form=ADVERSARIAL_FORM,
    max_new_tokens=48, first_line=True, max_chars=200, stop=("\n",))
