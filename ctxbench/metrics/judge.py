"""``llm_judge``: the J score of the Mem0 paper (an LLM labels each answer CORRECT or WRONG).

Prompt after mem0ai/mem0 ``evaluation/metrics/llm_judge.py`` (ACCURACY_PROMPT); like that code,
adversarial questions are not judged (score ``None``, excluded from the mean). Off by default:
add ``llm_judge`` to ``metrics`` and pick the judge with ``llm=...`` / ``judge_llm=...``.

Repeated judging (``judge.runs``, ``judge.temperature``, ``judge.seed`` in eval.yaml / score.yaml):
the Mem0 paper reports J as the mean ± std over 10 judge runs (its code judges with gpt-4o-mini at
temperature 0, where the API itself varies). With ``runs=N>1`` every answer is judged N times, run
``i`` sending ``seed + i`` as the call's sampling seed, so each run is its own call with its own call
cache key (a rerun with the same seeds replays the cache; other seeds ask again). ``runs=1`` sends no
seed: the call, and its cache key, are what they were before repeated judging existed. A question is
scored only when every run gave a label (any run's failed or unlabelled call leaves it ``None``), so
every run judges the same questions and the mean over questions of the per-question run average is
exactly the mean of the per-run J values; :mod:`.aggregate` reports their spread (``llm_judge_std``).
A judge that decodes greedily (a local ``llm=hf`` model at ``temperature=0``) gives N identical runs
(std 0; results.json ``judge.identical_runs``): sample with ``judge.temperature > 0`` for a spread.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.llm import schema
from ctxbench.core.registry import register
from ctxbench.core.types import Question
from ctxbench.metrics.base import answer_text, category_name

JUDGE_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""


def parse_label(text: str) -> int | None:
    """1 for CORRECT, 0 for WRONG, None if the reply names neither (or both)."""
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


LABEL_SCHEMA = schema.obj(label=schema.enum(["CORRECT", "WRONG"]))  # the prompt's {"label": ...}, enforced


@register("metric", "llm_judge")
class LLMJudge:
    name = "llm_judge"
    version = "mem0-judge-2"  # runs=1 unchanged; repeated runs are recorded in settings()
    reference = "mem0ai/mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT"
    needs_llm = True

    def __init__(self, llm: Any, max_new_tokens: int = 128, runs: int = 1, temperature: float = 0.0,
                 seed: int = 0):
        if int(runs) < 1:
            raise ConfigError(f"judge.runs={runs}: need >= 1 (the number of judge runs per answer)")
        if float(temperature) < 0:
            raise ConfigError(f"judge.temperature={temperature}: need >= 0")
        self.llm = llm
        self.max_new_tokens = max_new_tokens
        self.runs = int(runs)
        self.temperature = float(temperature)
        self.seed = int(seed)

    def seeds(self) -> list[int | None]:
        """The sampling seed of each run: none for a single run (today's call), ``seed + i`` for run i."""
        return [None] if self.runs == 1 else [self.seed + i for i in range(self.runs)]

    def settings(self) -> dict[str, Any]:
        """What results.json records about how J was judged."""
        return {"runs": self.runs, "temperature": self.temperature, "seeds": self.seeds()}

    def score_runs(self, prediction: str, question: Question) -> list[float | None]:
        """One label per run (1.0 CORRECT, 0.0 WRONG, None failed/unlabelled/adversarial)."""
        if category_name(question) == "adversarial":
            return [None] * self.runs
        prompt = JUDGE_PROMPT.format(question=question.question, gold_answer=answer_text(question.answer),
                                     generated_answer=prediction)
        return [self._judge(prompt, seed) for seed in self.seeds()]

    def score(self, prediction: str, question: Question) -> float | None:
        """The mean label over the runs; None unless every run labelled the answer."""
        labels = self.score_runs(prediction, question)
        if any(v is None for v in labels):
            return None
        return sum(labels) / len(labels)

    def _judge(self, prompt: str, seed: int | None) -> float | None:
        seeded = {} if seed is None else {"seed": seed}  # backends without seeds still serve runs=1
        r = self.llm.chat([{"role": "user", "content": prompt}], max_new_tokens=self.max_new_tokens,
                          temperature=self.temperature, phase="judge", json_mode=True, schema=LABEL_SCHEMA,
                          **seeded)
        if r.failed:
            return None
        label = parse_label(r.text)
        return None if label is None else float(label)
