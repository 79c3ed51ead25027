"""Baseline systems that need no memory construction: ``memory=full_context``, ``memory=no_context``.

``full_context`` puts the whole history in the prompt (rendered as the LoCoMo reference does);
when it does not fit ``llm.context_window - reserve`` tokens it drops the *oldest* turns (for a
document: the oldest tokens) and counts what it cut in ``usage.extra`` (``truncated_turns``,
``truncated_tokens``). ``no_context`` asks the question alone (a floor for every system).

Memory systems are built as ``cls(cfg, *, llm, embedder, workdir)``; these two need no embedder.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from ctxbench.config.schemas.memory import FullContextMemory, NoContextMemory
from ctxbench.qa import prompt_text
from ctxbench.qa.forms import conversation_intro
from ctxbench.core.render import render_history, render_session_block, render_turn
from ctxbench.core.registry import register
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Usage
from ctxbench.core.plan import planned
from ctxbench.llm.fit import held_text_tokens


class _LLMBaseline(System):
    needs_embedder: ClassVar[bool] = False  # the history whole or not at all: nothing is retrieved

    def __init__(self, cfg: Any, *, llm: Any, embedder: Any = None, workdir: Any = None):
        self.cfg = cfg
        self.llm = llm
        self.history: History | None = None

    def reset(self) -> None:
        self.history = None

    def memory_footprint(self) -> tuple[int, int]:
        """(items kept, tokens kept) for the history."""
        return 0, 0

    def _ask(self, question: Question, context: str, speakers: list[str], extra: dict[str, Any]) -> Prediction:
        msgs = self.answer_prompt.messages(question, context, speakers)
        r = self.llm.chat(msgs, max_new_tokens=self.answer_max_tokens(question), temperature=0.0, phase="answer",
                          **self.answer_prompt.call_kwargs())
        items, tokens = self.memory_footprint()
        usage = Usage(answer_prompt_tokens=r.prompt_tokens, answer_completion_tokens=r.completion_tokens,
                      answer_calls=1, held_text=held_text_tokens(self.llm, msgs, context, self.answer_max_tokens(question)),
                      memory_items=items, memory_tokens=tokens,
                      extra=dict(extra, failed_calls=int(r.failed), cached_calls=int(r.cached)))
        meta = {"context": context, **({"error": r.error} if r.failed else {})}
        return Prediction(text=r.text, usage=usage, meta=meta)


@register("memory", "no_context")
class NoContext(_LLMBaseline):
    """The question alone: what the model knows without the history."""
    Settings = NoContextMemory  # its config schema (ctxbench/config/schemas/memory.py)

    def ingest(self, history: History) -> None:
        self.history = history

    def answer(self, question: Question) -> Prediction:
        return self._ask(question, "", [], {})

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """One answer call per question, the question alone (exact)."""
        for q in questions:
            yield planned(self.llm, "answer", self.answer_prompt.messages(q, "", []), self.answer_max_tokens(),
                          "no_context.answer")


QUESTION_ALLOWANCE = 64  # tokens of a question's own text the history cut leaves room for (FullContext.budget)


@register("memory", "full_context")
class FullContext(_LLMBaseline):
    """The whole history in the prompt, cut from the oldest turns to fit the window."""
    Settings = FullContextMemory  # its config schema (ctxbench/config/schemas/memory.py)

    whole_history_baseline = True

    def __init__(self, cfg: Any, *, llm: Any, embedder: Any = None, workdir: Any = None):
        super().__init__(cfg, llm=llm, embedder=embedder, workdir=workdir)
        self.reserve = cfg.reserve
        self._turns: list[tuple[int, str, int]] = []  # (session index, rendered line, tokens)
        self._headers: list[tuple[str, int]] = []  # (session date, tokens of its header)
        self._doc_tokens = 0

    def ingest(self, history: History) -> None:
        self.history = history
        count = self.llm.count_tokens
        self._turns, self._headers = [], []
        self._doc_tokens = count(history.text) if not history.sessions else 0
        for si, s in enumerate(history.sessions):
            header = render_session_block(s.date, [])
            self._headers.append((s.date, count(header) + 1))  # +1: the blank line after a session
            for t in s.turns:
                line = render_turn(t.speaker, t.text)
                self._turns.append((si, line, count(line)))

    def memory_footprint(self) -> tuple[int, int]:
        """Every turn is kept (the whole history): turns, and their tokens."""
        if self.history is not None and not self.history.sessions:
            return 1, self._doc_tokens
        return len(self._turns), sum(n for _, _, n in self._turns)

    def budget(self, question: Question) -> int:
        """History tokens that fit beside ``question``'s prompt. The question's share is at least
        :data:`QUESTION_ALLOWANCE` tokens, so every question of a history up to that length sees the same
        history text (one cut per history, not per question): fairer to compare, and the prompts share
        their whole history prefix (``llm=hf`` prefix reuse, a server's prefix caching)."""
        speakers = self.history.speakers if self.history else []

        def overhead(q: Question) -> int:
            frame = prompt_text(self.answer_prompt.messages(q, "x"))
            return self.llm.count_tokens(conversation_intro(speakers) + frame) - 1

        floor = overhead(replace(question, question="")) + QUESTION_ALLOWANCE  # the same frame, no question text
        return self.llm.context_window - self.reserve - max(overhead(question), floor)

    def answer(self, question: Question) -> Prediction:
        assert self.history is not None, "ingest() a history before answer()"
        budget = self.budget(question)
        if not self.history.sessions:
            context, cut_tokens = self._fit_document(self.history.text, budget)
            extra = {"truncated_tokens": cut_tokens, "truncated_turns": 0}
        else:
            context, cut_turns, cut_tokens = self._fit_turns(budget)
            extra = {"truncated_turns": cut_turns, "truncated_tokens": cut_tokens,
                     "total_turns": len(self._turns)}
        return self._ask(question, context, self.history.speakers, extra)

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """One answer call per question with the history as :meth:`answer` fits it (exact: the same
        budget, cut and renderer; ``self.llm`` counts as the backend does)."""
        self.ingest(history)
        for q in questions:
            budget = self.budget(q)
            context = (self._fit_document(history.text, budget)[0] if not history.sessions
                       else self._fit_turns(budget)[0])
            yield planned(self.llm, "answer", self.answer_prompt.messages(q, context, history.speakers),
                          self.answer_max_tokens(), "full_context.answer")

    def _render(self, start: int) -> str:
        """The history from turn ``start`` on, through the one renderer every system shares."""
        return render_history(self.history, "locomo", first_turn=start)

    def _fit_turns(self, budget: int) -> tuple[str, int, int]:
        """Keep the newest turns whose summed tokens fit; then check the exact count."""
        total, used, start, seen = len(self._turns), 0, len(self._turns), set()
        for i in range(total - 1, -1, -1):
            si, _, n = self._turns[i]
            cost = n + (self._headers[si][1] if si not in seen else 0)
            if used + cost > budget:
                break
            used += cost
            seen.add(si)
            start = i
        context = self._render(start)
        while start < total and self.llm.count_tokens(context) > budget:  # BPE merges across lines
            start += 1
            context = self._render(start)
        cut_tokens = sum(n for _, _, n in self._turns[:start])
        return context, start, cut_tokens

    def _fit_document(self, text: str, budget: int) -> tuple[str, int]:
        """The longest suffix of ``text`` that fits (binary search on the start character)."""
        full = self.llm.count_tokens(text)
        if full <= budget:
            return text, 0
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.llm.count_tokens(text[mid:]) <= budget:
                hi = mid
            else:
                lo = mid + 1
        kept = text[lo:]
        return kept, full - self.llm.count_tokens(kept)
