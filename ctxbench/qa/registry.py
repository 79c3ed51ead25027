"""The answer prompts by name: ``qa_prompt=locomo|mem0|mem0g|amem|brief|ruler|longmemeval`` (eval.yaml)."""
from __future__ import annotations

from ctxbench.core.errors import ConfigError
from ctxbench.qa.prompt import AnswerPrompt
from ctxbench.qa.prompts import amem, brief, locomo, longmemeval, mem0, ruler

# Chosen by measurement on the dev split only (LoCoMo conv-26 + conv-30, sessions 1-5, 94 questions, SmolLM2-135M
# via llama.cpp): mean F1 on categories 1-4 over rag/full_context/no_context is brief 0.111, locomo 0.100,
# amem 0.085, mem0 0.067 (python -m ctxbench.qa.compare --sessions 5 --choose). Paper experiments set their own.
DEFAULT = "brief"
PROMPTS: dict[str, AnswerPrompt] = {p.name: p for p in (locomo.PROMPT, mem0.PROMPT, mem0.GRAPH_PROMPT,
                                                        amem.PROMPT, brief.PROMPT, ruler.PROMPT, longmemeval.PROMPT)}


def get_prompt(name: str | None) -> AnswerPrompt:
    """The prompt called ``name`` (None: the default); one line naming the key otherwise."""
    key = DEFAULT if name is None else str(name)
    if key in PROMPTS:
        return PROMPTS[key]
    from ctxbench.core.registry import get, plugin_names

    if key not in plugin_names("qa_prompt"):
        raise ConfigError(f"qa_prompt={key!r} is not an answer prompt; use one of "
                          f"{', '.join([*PROMPTS, *plugin_names('qa_prompt')])}")
    prompt = get("qa_prompt", key)  # a plug-in's: an AnswerPrompt instance
    if not isinstance(prompt, AnswerPrompt):
        raise ConfigError(f"qa_prompt={key!r}: the plug-in's object is a {type(prompt).__name__}, not an AnswerPrompt "
                          "(ctxbench.api.AnswerPrompt)")
    return prompt
