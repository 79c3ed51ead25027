"""``format=evermemos``: EverMemOS-style ``eval_results.json`` (EverMind-AI/EverMemOS; dial481/locomo-audit
``fc-baseline/results/*/eval_results.json``).

``{"total_questions", "correct", "accuracy", "detailed_results": {"locomo_exp_user_<N>": [{"question_id":
"locomo_<N>_qa<J>", "question", "golden_answer", "generated_answer", "llm_judgments": {"judgment_1": bool,
...}, "category"}]}, "metadata"?}``: one label per judge run (``judgment_<k>``, in k order); ``qa<J>``
names the question's index in its conversation (used to settle a question asked twice).
"""
from __future__ import annotations

import re
from pathlib import Path

from ctxbench.core.registry import register
from ctxbench.data.errors import DataError
from ctxbench.data.records import short_repr
from ctxbench.referee.rows import (grouped_rows, ArtifactRow, label_value, load_object, need_list,
                                   need_mapping, text_field)

QA_INDEX = re.compile(r"qa(\d+)$")
JUDGMENT = re.compile(r"judgment_(\d+)$")


@register("format", "evermemos")
class EverMemOSFormat:
    name = "evermemos"
    description = "EverMemOS eval_results.json {detailed_results: {locomo_exp_user_N: [{question_id, question, golden_answer, generated_answer, llm_judgments, category}]}}"
    metrics = ["f1", "f1_mem0", "bleu1_mem0", "llm_judge", "llm_judge_majority"]
    stored_metrics: dict[str, str] = {}

    def read(self, path: Path) -> list[ArtifactRow]:
        top = need_mapping(load_object(path), path, "with detailed_results")
        if "detailed_results" not in top:
            raise DataError(path, "missing required field (EverMemOS eval_results.json keeps its rows there)",
                            field="detailed_results")
        data = top["detailed_results"]
        if not isinstance(data, dict):
            raise DataError(path, f"expected an object {{locomo_exp_user_N: [rows]}}, got {type(data).__name__}",
                            field="detailed_results")
        out = []
        for key, idx, where, row in grouped_rows(data, path, "detailed_results."):
            qid = row.get("question_id")
            m = QA_INDEX.search(qid) if isinstance(qid, str) else None
            out.append(ArtifactRow(conversation=str(key), conv_index=idx, location=where,
                                   question=text_field(row, "question", path, where, empty_ok=False),
                                   prediction=text_field(row, "generated_answer", path, where),
                                   labels=self._labels(row, path, where), category=row.get("category"),
                                   qa_index=int(m.group(1)) if m else None, gold=row.get("golden_answer")))
        return out

    @staticmethod
    def _labels(row: dict, path: Path, where: str) -> list[float | None] | None:
        if "llm_judgments" not in row:
            return None
        jd = row["llm_judgments"]
        if not isinstance(jd, dict):
            raise DataError(path, f"expected {{judgment_1: true, ...}}, got {short_repr(jd)}", record=where,
                            field="llm_judgments")
        runs: dict[int, float | None] = {}
        for k, v in jd.items():
            m = JUDGMENT.fullmatch(str(k))
            if m is None:
                raise DataError(path, f"judge runs are named judgment_<k>, got {short_repr(k)}", record=where,
                                field="llm_judgments")
            runs[int(m.group(1))] = label_value(v, path, where, f"llm_judgments.{k}")
        return [runs.get(k) for k in range(1, max(runs, default=0) + 1)]
