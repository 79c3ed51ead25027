"""``format=zep``: Zep's LoCoMo files (getzep/zep-papers ``kg_architecture_agent_memory/locomo_eval/data``).

``zep_locomo_grades.json``: ``{"locomo_experiment_user_<N>": [{"question", "answer", "golden_answer",
"grade", "category"}]}`` (``answer`` is Zep's response, ``grade`` the one gpt-4o-mini judge label);
``zep_locomo_responses.json`` has the same keys with ``duration_ms`` and no grade or category (then no
judge labels are imported).
"""
from __future__ import annotations

from pathlib import Path

from ctxbench.core.registry import register
from ctxbench.referee.rows import (grouped_rows, ArtifactRow, label_value, load_object, need_list,
                                   need_mapping, text_field)


@register("format", "zep")
class ZepFormat:
    name = "zep"
    description = "Zep zep_locomo_grades.json / zep_locomo_responses.json {locomo_experiment_user_N: [{question, answer, golden_answer, grade?, category?}]}"
    metrics = ["f1", "f1_mem0", "bleu1_mem0", "llm_judge", "llm_judge_majority"]
    stored_metrics: dict[str, str] = {}

    def read(self, path: Path) -> list[ArtifactRow]:
        data = need_mapping(load_object(path), path, "{locomo_experiment_user_N: [rows]}")
        out = []
        for key, idx, where, row in grouped_rows(data, path):
            graded = "grade" in row
            out.append(ArtifactRow(conversation=str(key), conv_index=idx, location=where,
                                   question=text_field(row, "question", path, where, empty_ok=False),
                                   prediction=text_field(row, "answer", path, where),
                                   labels=[label_value(row["grade"], path, where, "grade")] if graded else None,
                                   category=row.get("category"), gold=row.get("golden_answer")))
        return out
