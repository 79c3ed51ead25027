"""One judge: a pinned, versioned prompt with its source, the call it makes and how its reply is read.

A :class:`JudgePrompt` is a frozen value (no state), registered under its name with
``register("judge", name)`` (``python -m ctxbench ls`` lists them). It holds:

- ``name``, ``version`` (bumped whenever the text, the call or the parse changes: results.json records
  it, and the call cache keys on the text itself), ``source`` (repository, commit, path, symbol);
- ``messages(question, gold, answer, question_type)``: the chat messages of one judgement, rendered
  the way the source renders them (``str.format`` or ``str.replace``, a system message or not);
- the call: ``max_new_tokens``, ``json_mode`` and ``schema`` (the backend enforces the schema where it
  can; the source's own decoding is in ``decoding``);
- ``parse(reply) -> 1 | 0 | None``: the source's own reading of the label (1 correct, 0 wrong; None
  only where the source could not read one either — that answer is then left unscored);
- ``label_format``: the label format in words, and ``examples``: replies with the label the
  source's parse gives them (tests check every judge's parse against its examples);
- ``notes``: where ctxbench's copy departs from the source, if anywhere;
- ``source_parse``: the source's own label parse where ``parse`` is more forgiving (``judge.parse=source``
  uses it; mem0's: the JSON ``label`` exactly ``CORRECT``, case-sensitive);
- ``std_ddof`` / ``std_source``: how the source reports the std over judge runs (``judge.runs > 1``):
  EverMemOS takes ``np.std`` of the per-run accuracies (ddof 0); a source that reports no such std gets
  the sample std (ddof 1). results.json says which (``metric_runs.<judge>.std``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

Message = dict[str, str]


@dataclass(frozen=True)
class JudgePrompt:
    """A judge prompt with its provenance, its call and its label parse (see the module docstring)."""

    name: str
    version: str
    source: str
    render: Callable[[str, str, str, str], list[Message]]  # (question, gold, answer, question_type) → messages
    parse: Callable[[str], int | None]
    label_format: str
    examples: tuple[tuple[str, int | None], ...]  # (reply, the label parse gives it)
    max_new_tokens: int = 128
    json_mode: bool = False
    schema: dict[str, Any] | None = None
    decoding: str = ""  # the source's model and decoding, in words
    notes: str = field(default="", compare=False)
    source_parse: Callable[[str], int | None] | None = None  # the source's own parse where ``parse`` departs
    std_ddof: int = 1  # the std over judge runs as the source reports it (EverMemOS: np.std, ddof 0)
    std_source: str = "no std over runs in the source: the sample std (ddof 1)"

    def messages(self, question: str, gold: str, answer: str, question_type: str = "") -> list[Message]:
        return self.render(question, gold, answer, question_type)

    def record(self) -> dict[str, Any]:
        """What results.json / judges.json record about the prompt."""
        return {"prompt_version": self.version, "source": self.source, "label_format": self.label_format,
                "max_new_tokens": self.max_new_tokens, "json_mode": self.json_mode,
                "schema": self.schema is not None, "source_decoding": self.decoding,
                "std_over_runs": {"ddof": self.std_ddof, "convention": self.std_source}}


def user_only(template: str) -> Callable[[str, str, str, str], list[Message]]:
    """One user message: ``template.format(question=, gold_answer=, generated_answer=)``."""
    def render(question: str, gold: str, answer: str, question_type: str = "") -> list[Message]:
        return [{"role": "user", "content": template.format(question=question, gold_answer=gold,
                                                            generated_answer=answer)}]
    return render


def label_word_or_json(text: str) -> int | None:
    """``{"label": "CORRECT"|"WRONG"}`` (anywhere in the reply), else the one of the two words the
    reply names; None if it names neither or both (ctxbench's reading since ``mem0-judge-1``)."""
    m = re.search(r"\{.*\}", text, flags=re.S)
    if m:
        try:
            label = str(json.loads(m.group(0)).get("label", "")).strip().upper()
            if label in ("CORRECT", "WRONG"):
                return int(label == "CORRECT")
        except (json.JSONDecodeError, AttributeError):
            pass
    up = text.upper()
    has_c, has_w = "CORRECT" in up, "WRONG" in up
    if has_c != has_w:
        return int(has_c)
    return None
