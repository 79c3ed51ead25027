"""Answer prompts: a registry of versioned prompts (:mod:`.registry`), each one frozen :class:`AnswerPrompt`."""
from .prompt import AnswerPrompt, prompt_text
from .registry import DEFAULT, PROMPTS, get_prompt

__all__ = ["AnswerPrompt", "DEFAULT", "PROMPTS", "get_prompt", "prompt_text"]
