"""Text helpers for the scripted replies each prompt module declares beside its prompts.

A prompt module may define ``SCRIPTED = {system_prompt: reply(user_text) -> str}``: a small
*valid* reply derived from the prompt's own text. :class:`ctxbench.bench.scripted_llm.ScriptedChatModel`
(the zero-cost chat model of ``bench suite=memory_systems`` and of the contract tests) collects
them from every module here, matching a system message that *starts with* the key (text before a
template's first ``{`` placeholder), so adding a memory system touches no central file.
"""
from __future__ import annotations

import re

WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


def words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def after(text: str, marker: str) -> str:
    return text.split(marker, 1)[1] if marker in text else text


def lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def entities(text: str, k: int = 6) -> list[str]:
    return list(dict.fromkeys(NAME.findall(text)))[:k]


def summary(user: str) -> str:
    """A one-paragraph 'summary': the first words of the prompt's content."""
    return words(" ".join(lines(user)[1:]), 40) or "Nothing happened."


def template_key(template: str) -> str:
    """The fixed start of a system-prompt template (before its first ``{placeholder}``)."""
    return template.split("{", 1)[0]
