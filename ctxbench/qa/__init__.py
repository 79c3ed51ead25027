"""Answer prompts: a registry of versioned prompts (:mod:`.registry`), each one frozen :class:`AnswerPrompt`."""
from ctxbench.qa.prompt import AnswerPrompt, prompt_text
from ctxbench.qa.registry import DEFAULT, PROMPTS, get_prompt

__all__ = ["AnswerPrompt", "DEFAULT", "PROMPTS", "get_prompt", "prompt_text"]
