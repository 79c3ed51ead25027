"""The answer prompts by name: ``qa_prompt=locomo|mem0|mem0g|amem|brief`` (eval.yaml)."""
from __future__ import annotations

from ..errors import ConfigError
from .prompt import AnswerPrompt
from .prompts import amem, brief, locomo, mem0

DEFAULT = "locomo"  # chosen by measurement on the dev split (scripts/compare_qa_prompts.py), not on held-out
PROMPTS: dict[str, AnswerPrompt] = {p.name: p for p in (locomo.PROMPT, mem0.PROMPT, mem0.GRAPH_PROMPT,
                                                        amem.PROMPT, brief.PROMPT)}


def get_prompt(name: str | None) -> AnswerPrompt:
    """The prompt called ``name`` (None: the default); one line naming the key otherwise."""
    key = DEFAULT if name is None else str(name)
    if key not in PROMPTS:
        raise ConfigError(f"qa_prompt={key!r} is not an answer prompt; use one of {', '.join(PROMPTS)}")
    return PROMPTS[key]
