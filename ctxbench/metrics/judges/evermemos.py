"""``evermemos``: the EverMemOS LoCoMo judge, as dial481/locomo-audit re-ran it.

Source: EverMind-AI/EverMemOS ``evaluation/config/prompts.yaml`` ``llm_judge`` (``system_prompt``,
``user_prompt``) and ``evaluation/src/evaluators/llm_judge.py`` ``_judge_answer`` / ``_extract_json``,
read from dial481/locomo-audit@9493fb4b4af4 (``evaluation/config/prompts.yaml``, byte for byte the
upstream file per its methodology/prompts.md, SHA-256 ba4f668e…; the judge logic ported in
``fc-baseline/scripts/fc_eval.py`` ``judge_answer`` / ``extract_json``): a system message and a user
message rendered as EverMemOS renders them (``evaluation/src/utils/prompts.py``: ``get_prompt`` strips
the YAML block, ``format_prompt`` fills it with ``str.format(question=, golden_answer=,
generated_answer=)``). locomo-audit's port renders with chained ``str.replace`` and keeps the block's
trailing newline; the two differ when a question or gold answer holds a later placeholder
(``{golden_answer}`` in a question: ``str.replace`` substitutes it, ``str.format`` keeps it) and by the
trailing newlines. ctxbench rendered as the port until issue 54 (``evermemos-judge-1``);
gpt-4o-mini, temperature 0, no response format, no token cap; 3 runs per answer (``num_runs: 3`` in
its locomo.yaml; accuracy per run, then mean and std — ctxbench's ``judge.runs=3``).

The user prompt is character for character ctxbench's ``mem0`` text (:mod:`.mem0`) with the gold
placeholder named ``{golden_answer}``; the judges differ in the system message, the call (no JSON
mode here) and the parse. The parse is the source's: the JSON in a ```json fence```, else the first
``{... "label": "..." ...}`` object, else the whole reply; ``json.loads`` it; 1 if its ``label``
upper-cased is ``CORRECT``, else 0 — a reply with no readable JSON counts as WRONG, as in the source
(its exception handler returns False). ctxbench caps the reply at 128 new tokens (the source: none).
"""
from __future__ import annotations

import json
import re

from ctxbench.core.registry import register
from ctxbench.metrics.judges.mem0 import ACCURACY_PROMPT
from ctxbench.metrics.judges.prompt import JudgePrompt, Message

SYSTEM_PROMPT = "You are an expert grader that determines if answers to questions match a gold standard answer\n"
USER_PROMPT = ACCURACY_PROMPT.replace("{gold_answer}", "{golden_answer}")  # the YAML block, as loaded


def render(question: str, gold: str, answer: str, question_type: str = "") -> list[Message]:
    """EverMemOS's ``get_prompt`` (the block stripped) and ``format_prompt`` (``str.format``)."""
    user = USER_PROMPT.strip().format(question=question, golden_answer=gold, generated_answer=answer)
    return [{"role": "system", "content": SYSTEM_PROMPT.strip()}, {"role": "user", "content": user}]


def extract_json(content: str) -> str:
    """The source's ``_extract_json``: a fenced object, else a flat object with a "label" key, else all."""
    fenced = re.search(r"```(?:json)?\s*(\{[^`]*\})\s*```", content, re.DOTALL)
    if fenced:
        return fenced.group(1).strip()
    flat = re.search(r'\{[^{}]*"label"\s*:\s*"[^"]*"[^{}]*\}', content)
    if flat:
        return flat.group(0)
    return content.strip()


def parse(text: str) -> int | None:
    """1 if the extracted JSON's ``label`` is CORRECT (any case, stripped), else 0 (never None)."""
    if not text:
        return 0
    try:
        result = json.loads(extract_json(text))
        return int(str(result.get("label", "")).strip().upper() == "CORRECT")
    except (json.JSONDecodeError, AttributeError):
        return 0


JUDGE = register("judge", "evermemos")(JudgePrompt(
    name="evermemos", version="evermemos-judge-2",
    source="EverMind-AI/EverMemOS evaluation/config/prompts.yaml llm_judge + evaluation/src/evaluators/llm_judge.py "
           "(_judge_answer, _extract_json), via dial481/locomo-audit@9493fb4b4af4",
    render=render, parse=parse,
    label_format='{"label": "CORRECT"|...} in a fence, inline, or the whole reply; anything else = WRONG',
    examples=(('```json\n{"label": "CORRECT"}\n```', 1), ('Right. {"label": "correct"}', 1),
              ('{"label": "WRONG"}', 0), ("CORRECT", 0), ("", 0)),
    max_new_tokens=128, json_mode=False, schema=None,
    decoding="gpt-4o-mini, temperature 0, no response format, 3 runs per answer (mean and std of per-run accuracy)",
    notes="128 new tokens (the source: no cap); rendered as EverMemOS (strip + str.format), not as locomo-audit's "
          "port (str.replace, trailing newline kept)",
    std_ddof=0, std_source="EverMemOS evaluation/src/evaluators/llm_judge.py: np.std of the per-run accuracies (ddof 0)",
))
