"""A ctxbench memory-system plug-in (docs/plugins.md): answers from the last n turns of the history."""
from dataclasses import dataclass

from ctxbench.api import Prediction, System, Usage

ctxbench_api = ">=1.0,<2"  # the ctxbench API versions this plug-in supports


class LastTurns(System):
    """Answers from the last n turns of the history."""

    @dataclass
    class Settings:  # memory.n_turns, typed and bounded like a built-in's key
        n_turns: int = 5

    def __init__(self, cfg, *, llm, embedder=None, workdir=None):
        self.cfg, self.llm, self.turns = cfg, llm, []

    def ingest(self, history):
        self.turns = [t for s in history.sessions for t in s.turns][-self.cfg.n_turns:]

    def answer(self, question):
        context = "\n".join(f"{t.speaker}: {t.text}" for t in self.turns)
        r = self.llm.chat(self.answer_prompt.messages(question, context), max_new_tokens=self.answer_max_tokens())
        return Prediction(text=r.text, usage=Usage(answer_prompt_tokens=r.prompt_tokens,
                                                   answer_completion_tokens=r.completion_tokens, answer_calls=1,
                                                   held_text=self.llm.count_tokens(context)))
