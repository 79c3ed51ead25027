"""The QA chat prompt split around the history, for systems that hold the history as a KV cache.

A fixed-cache method (StreamingLLM, H2O, LoCoCo, the presses, kvpress's presses) streams the text
*before* the question at ingest and the rest at answer time. :attr:`System.answer_prompt`
(LoCoMo's: [intro] + context, then the question) puts the context before the question, so the part
before the context does not depend on the question and can be streamed at ingest; a prompt whose
head does depend on it (A-Mem's, per category) is refused at answer time.
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.types import Question

MARKER = "\u0000CTX\u0000"


def qa_frame(tokenizer: Any, answer_prompt: Any, question: Question | None, speakers: list[str]) -> tuple[str, str]:
    """(text before the history, text after it) of ``answer_prompt`` rendered with ``tokenizer``'s
    chat template (plain text when it has none); ``question=None`` renders a placeholder question."""
    from ctxbench.llm.chat_template import chat_text
    from ctxbench.qa import prompt_text

    q = question or Question(id="", question="?", answer="")
    msgs = answer_prompt.messages(q, MARKER, speakers)
    if getattr(tokenizer, "chat_template", None):
        full = chat_text(tokenizer, msgs)  # a reply prefix ends ``after``: the answer continues it
    else:
        full = prompt_text(msgs)
    if MARKER not in full:
        raise ValueError("the QA prompt template dropped the context placeholder")
    before, after = full.split(MARKER, 1)
    return before, after


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an answer: EOS and the chat template's end-of-turn (ChatML's ``<|im_end|>``)."""
    ids = [tokenizer.eos_token_id]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if end != getattr(tokenizer, "unk_token_id", None):
        ids.append(end)
    return sorted({i for i in ids if isinstance(i, int)})
