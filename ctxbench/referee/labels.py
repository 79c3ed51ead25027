"""Judge labels stored in an artifact as ordinary metrics: ``llm_judge`` (one value per judge run in
``llm_judge_runs``, their mean per question; :mod:`ctxbench.metrics.aggregate` adds ``llm_judge_std`` over
runs) and ``llm_judge_majority`` (1 when at least k//2+1 of the k runs said CORRECT, the rule of
EverMemOS's ``llm_judge.py``; a missing run counts as not CORRECT). No model is called: the published J
is reproduced from the labels the authors stored. Re-judging the same records with a judge panel is the
judge registry's (``judge.panel``)."""
from __future__ import annotations

from typing import Any

from ctxbench.core.types import Question


STD_OF_FORMAT = {"evermemos": (0, "EverMemOS evaluation/src/evaluators/llm_judge.py: np.std of the per-run "
                                   "accuracies (ddof 0), as its std_accuracy")}


class StoredJudge:
    """``llm_judge`` from the artifact's labels (keyed by the matched question id)."""

    name = "llm_judge"
    version = "artifact-labels-1"

    def __init__(self, labels: dict[str, list[float | None]], runs: int, fmt: str):
        self.labels, self.runs, self.fmt = labels, runs, fmt
        # the std over runs as the artifact's source reports it (EverMemOS: np.std, ddof 0; others ddof 1)
        self.std_ddof, self.std_source = STD_OF_FORMAT.get(fmt, (1, "the sample std (ddof 1)"))
        self.reference = f"the artifact's own judge labels (format={fmt}), one per judge run"

    def settings(self) -> dict[str, Any]:
        return {"runs": self.runs, "source": "artifact", "format": self.fmt}

    def score_runs(self, prediction: str, question: Question) -> list[float | None]:
        got = list(self.labels.get(question.id) or [])
        return (got + [None] * self.runs)[: self.runs]

    def score(self, prediction: str, question: Question) -> float | None:
        runs = self.score_runs(prediction, question)
        return None if any(v is None for v in runs) else sum(runs) / len(runs)


class StoredMajority:
    """``llm_judge_majority``: the majority vote over the stored runs."""

    name = "llm_judge_majority"
    version = "artifact-majority-1"

    def __init__(self, labels: dict[str, list[float | None]], runs: int, fmt: str):
        self.labels, self.runs, self.fmt = labels, runs, fmt
        self.reference = (f"majority vote of the artifact's {runs} judge run(s) (format={fmt}): CORRECT in at "
                          f"least {runs // 2 + 1}")

    def score(self, prediction: str, question: Question) -> float | None:
        got = self.labels.get(question.id)
        if not got or all(v is None for v in got):
            return None
        return float(sum(1 for v in got if v == 1.0) >= self.runs // 2 + 1)


def judge_metrics(labels: dict[str, list[float | None]], fmt: str, wanted: list[str]) -> list[Any]:
    runs = max((len(v) for v in labels.values()), default=0)
    out: list[Any] = []
    if runs and "llm_judge" in wanted:
        out.append(StoredJudge(labels, runs, fmt))
    if runs and "llm_judge_majority" in wanted:
        out.append(StoredMajority(labels, runs, fmt))
    return out
