"""An unpublished ctxbench plug-in, loaded with ``plugins=docs/examples/recent_turns.py`` (docs/plugins.md)."""
from dataclasses import dataclass

from ctxbench.api import Prediction, System, Usage, register, setting


@register("memory", "recent_turns")
class RecentTurns(System):
    """Answers from the turns of the last sessions of the history."""

    @dataclass
    class Settings:
        sessions: int = setting(1, "the last N sessions are shown to the answering model", None)

    def __init__(self, cfg, *, llm, embedder=None, workdir=None):
        self.cfg, self.llm, self.context = cfg, llm, ""

    def ingest(self, history):
        kept = history.sessions[-self.cfg.sessions:]
        self.context = "\n".join(f"{t.speaker}: {t.text}" for s in kept for t in s.turns)

    def answer(self, question):
        r = self.llm.chat(self.answer_prompt.messages(question, self.context), max_new_tokens=self.answer_max_tokens())
        return Prediction(text=r.text, usage=Usage(answer_prompt_tokens=r.prompt_tokens,
                                                   answer_completion_tokens=r.completion_tokens, answer_calls=1,
                                                   held_text=self.llm.count_tokens(context)))
