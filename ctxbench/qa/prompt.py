"""One answer prompt: what a system asks its model with the question and the context, and how the reply is cleaned.

An :class:`AnswerPrompt` is a frozen value (no state): its name, version and source (recorded in
results.json ``qa_prompt``), its system message, the function that renders the user message (or,
for prompts that are one system message, the only message), the question part alone for systems
that carry the context themselves (memory slots, compressed KV), its answer token cap, and its
post-processing rules. The evaluator post-processes every raw reply once with :meth:`postprocess`.

A reply prefix (``reply_prefix``, RULER's answer prefix for ``qa_prompt=ruler``) starts the model's
turn: :meth:`messages` and :meth:`instruction_messages` end with an assistant message holding it, which
every renderer continues instead of opening a new turn (:func:`ctxbench.llm.chat_template.chat_text`
for a tokenizer's chat template: ``llm=hf``, the KV methods' ``qa_frame``, ``method=lm``, CCM;
``llm=openai`` sends it as the last message; :meth:`instruction_text` ends with it for ICAE). The
prefix belongs to the prompt: the reply is what the model writes after it.

Stop strings (``stop``): a prompt that keeps only the reply's first line declares ``stop=("\n",)`` and
the systems send it with the answer call (:meth:`call_kwargs`), so the backend stops at the first line
break after the reply's text instead of running to the cap (:mod:`ctxbench.llm.stop`). Only such a
prompt may declare one: cutting there leaves :meth:`postprocess`'s answer as it was.

The answer cap: a system's own explicit cap (``memory.answer_max_tokens``, ``memory.max_new_tokens``
of the baselines, ``method.max_new_tokens``) wins; ``null`` there means the prompt's
``max_new_tokens`` (:meth:`cap`). results.json records the cap used (``qa_prompt.answer_max_tokens``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ctxbench.qa.forms import postprocess as option_postprocess
from ctxbench.core.types import Question


@dataclass(frozen=True)
class AnswerPrompt:
    """An answer prompt with its provenance and post-processing (see the module docstring)."""

    name: str
    version: str
    source: str  # where the text comes from: repository, file, symbol
    user: Callable[[Question, str, list[str]], str]  # (question, context, speakers) → the message text
    instruction: Callable[[Question], str]  # the question part without the context
    system: str | None = None  # a system message before the user message (None: none)
    role: str = "user"  # the role of the rendered message ("system" for Mem0's one-message prompt)
    temporal_hint: str = ""  # what temporal questions get (documentation; the renderer applies it)
    adversarial_form: str = ""  # how adversarial questions are asked (documentation)
    max_new_tokens: int = 32  # the answer cap when the system sets none
    first_line: bool = False  # keep the reply's first non-empty line
    max_chars: int | None = None  # cut the reply to this many characters
    json_field: str | None = None  # a reply that is a JSON object: keep this field's value
    reply_prefix: Callable[[Question], str] | None = None  # text that starts the model's turn (None: none)
    stop: tuple[str, ...] = ()  # strings that end the reply (only with first_line: see the module doc)
    notes: str = field(default="", compare=False)  # how ctxbench's rendering departs from the source

    def __post_init__(self) -> None:
        if self.stop and (not self.first_line or self.json_field or any(s != "\n" for s in self.stop)):
            raise ValueError(f"answer prompt {self.name!r}: stop={self.stop!r} would change its answers "
                             "(only stop=('\\n',) with first_line=True and no json_field keeps them)")

    def call_kwargs(self) -> dict[str, Any]:
        """What an answer call adds to ``chat()``: ``{"stop": [...]}`` when the prompt has stop strings, else ``{}``."""
        return {"stop": list(self.stop)} if self.stop else {}

    # ---- rendering -----------------------------------------------------------------------------
    def messages(self, question: Question, context: str, speakers: list[str] | None = None) -> list[dict[str, str]]:
        """Chat messages: [system] + the rendered message with ``context`` and the question [+ the reply prefix]."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        body = [{"role": self.role, "content": self.user(question, context, list(speakers or []))}]
        return head + body + self._prefix_message(question)

    def instruction_messages(self, question: Question) -> list[dict[str, str]]:
        """Chat messages without the context (the system holds it): [system] + the question part [+ the reply prefix]."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        body = [{"role": self.role, "content": self.instruction(question).lstrip("\n")}]
        return head + body + self._prefix_message(question)

    def instruction_text(self, question: Question) -> str:
        """The question part as plain text, after the system message if there is one (no chat template),
        ending with the reply prefix on its own line if there is one."""
        body = self.instruction(question)
        text = f"{self.system}\n\n{body.lstrip(chr(10))}" if self.system else body
        prefix = self.prefix(question)
        return f"{text}\n{prefix}" if prefix else text

    def prefix(self, question: Question) -> str:
        """The reply prefix for ``question`` ("" when the prompt has none)."""
        return self.reply_prefix(question) if self.reply_prefix is not None else ""

    def _prefix_message(self, question: Question) -> list[dict[str, str]]:
        prefix = self.prefix(question)
        return [{"role": "assistant", "content": prefix}] if prefix else []

    # ---- answers -------------------------------------------------------------------------------
    def cap(self, explicit: Any = None) -> int:
        """The answer token cap: ``explicit`` (a system config's own) when set, else the prompt's."""
        return int(explicit) if explicit is not None else int(self.max_new_tokens)

    def postprocess(self, question: Question, text: str) -> str:
        """Clean a raw reply once: JSON field, first line, length cap, then option-letter mapping.

        Idempotent: each step leaves its own output unchanged.
        """
        pred = (text or "").strip()
        if self.json_field:
            pred = _json_field(pred, self.json_field)
        if self.first_line:
            pred = next((ln.strip() for ln in pred.splitlines() if ln.strip()), "")
        if self.max_chars is not None and len(pred) > self.max_chars:
            pred = pred[: self.max_chars].rstrip()
        return option_postprocess(question, pred)

    def record(self) -> dict[str, Any]:
        """What results.json records about the prompt."""
        return {"name": self.name, "version": self.version, "source": self.source,
                "system": self.system is not None, "max_new_tokens": self.max_new_tokens,
                "reply_prefix": self.reply_prefix is not None, "stop": list(self.stop),
                "postprocess": {"first_line": self.first_line, "max_chars": self.max_chars,
                                "json_field": self.json_field}}


def _json_field(text: str, key: str) -> str:
    """``text``'s ``key`` when it is a JSON object (or one inside a ```json fence```), else ``text``."""
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text)
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, ValueError):
        return text
    if isinstance(obj, dict) and key in obj:
        return str(obj[key]).strip()
    return text


def prompt_text(messages: list[dict[str, str]]) -> str:
    """Messages as one text for a model without a chat template (one message: its content)."""
    return "\n\n".join(m["content"] for m in messages)
