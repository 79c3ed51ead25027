"""Chat messages as the text a local model reads: its tokenizer's chat template, continuing a reply prefix.

A conversation that ends with an assistant message (an answer prompt's reply prefix:
:attr:`ctxbench.qa.prompt.AnswerPrompt.reply_prefix`) is rendered with ``continue_final_message=True``
and no generation prompt, so the model's turn starts with the prefix and the model writes on from it;
any other conversation gets the generation prompt (a new assistant turn). One function, used by every
local renderer (``llm=hf``, the KV methods' ``qa_frame``, ``method=lm``, CCM), so they agree.
"""
from __future__ import annotations

from typing import Any


def continues(messages: list[dict[str, str]]) -> bool:
    """Whether ``messages`` end with an assistant message the model should continue."""
    return bool(messages) and messages[-1].get("role") == "assistant"


def chat_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """``messages`` through ``tokenizer``'s chat template, ready for the model's reply (see the module docstring)."""
    if continues(messages):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                             continue_final_message=True)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
