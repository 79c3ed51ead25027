"""The few dataclasses every loader yields and every system consumes.

A *history* is either sessions of timestamped turns (LoCoMo, DialSim) or one long document
(PwC context, Pile text). A *sample* is a history with the questions asked about it. Systems
ingest a history and answer questions with a :class:`Prediction` that carries its own
:class:`Usage` (counted by the system that did the work, never estimated afterwards).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class Turn:
    speaker: str
    text: str
    id: str = ""  # e.g. LoCoMo dia_id "D1:3"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Session:
    id: str
    turns: list[Turn]
    date: str = ""  # as the dataset writes it, e.g. "1:56 pm on 8 May, 2023"


@dataclass
class History:
    """Sessions of turns, or a single document (``text``) when ``sessions`` is empty."""

    id: str
    sessions: list[Session] = field(default_factory=list)
    text: str = ""
    speakers: list[str] = field(default_factory=list)

    def render(self, with_dates: bool = True) -> str:
        """The whole history as plain text (:func:`ctxbench.core.render.render_history`, ``plain`` style)."""
        from ctxbench.core.render import render_history

        return render_history(self, "plain", with_dates=with_dates)


@dataclass
class Question:
    id: str
    question: str
    answer: str
    category: int | str = 0
    category_name: str = ""
    evidence: list[str] = field(default_factory=list)
    adversarial_answer: str | None = None
    options: list[str] | None = None  # multiple-choice (DialSim)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    history: History
    questions: list[Question]


@dataclass
class Usage:
    """Cost of one answer, as counted by the system.

    Construction (memory building) is counted per history; the evaluator amortises it over the
    history's questions. Answer fields are per question. ``held_*`` is what the answering model holds
    when it answers, counted the same way by every system: history or memory text actually in the
    answer prompt (never instructions or the question), KV slots of compressed history, soft slots.
    ``answer_prompt_tokens`` counts the text tokens of the answer prompt (held text included, KV and
    soft slots not: those are counted only as held).
    """

    construction_prompt_tokens: int = 0
    construction_completion_tokens: int = 0
    construction_calls: int = 0
    answer_prompt_tokens: int = 0
    answer_completion_tokens: int = 0
    answer_calls: int = 0
    # what the answering model holds when it answers (the one budget axis, :attr:`held`):
    held_text: int = 0  # tokens of history/memory text in the answer prompt as sent (after any trimming)
    held_kv_slots: int = 0  # KV positions per layer of compressed history the answer attends to
    held_soft_slots: int = 0  # soft memory-slot embeddings in the answer prompt (ICAE)
    memory_items: int = 0  # records / slots / KV entries kept
    memory_tokens: int = 0  # tokens stored in memory
    kv_bytes: int = 0  # bytes of the KV the system holds for the history (all layers, K and V)
    ingest_seconds: float = 0.0
    answer_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def held(self) -> int:
        """Held context units of this answer: text tokens + KV slots + soft slots (:data:`HELD_AXIS`)."""
        return self.held_text + self.held_kv_slots + self.held_soft_slots

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Usage":
        """From a record; keys it does not know are dropped (an old record's ``context_tokens`` too)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


HELD_FIELDS = ("held_text", "held_kv_slots", "held_soft_slots")
HELD_AXIS = "text tokens + KV slots + soft slots the answering model holds when it answers"


@dataclass
class Prediction:
    text: str
    usage: Usage = field(default_factory=Usage)
    meta: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # this answer's own structured-output counts
