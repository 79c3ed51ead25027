"""``format=mem0``: mem0's ``evaluation/evals.py`` output (mem0ai/mem0, now mem0ai/memory-benchmarks).

``{"<conversation index>": [{"question", "answer", "response", "category", "bleu_score"?, "f1_score"?,
"llm_score"?}, ...]}``: ``answer`` is the gold the run was given, ``response`` the system's answer,
``category`` LoCoMo's id as a string, ``llm_score`` the one judge label (0/1) of mem0's ``llm_judge.py``,
``bleu_score`` / ``f1_score`` mem0's per-question scores (reproduced by ``bleu1_mem0`` / ``f1_mem0``).
The same shape without the scores (the search step's output ``evals.py`` reads) is accepted too.
"""
from __future__ import annotations

from pathlib import Path

from ctxbench.core.registry import register
from ctxbench.referee.rows import (grouped_rows, ArtifactRow, label_value, load_object, need_list,
                                   need_mapping, number_field, text_field)


@register("format", "mem0")
class Mem0Format:
    name = "mem0"
    description = "mem0 evaluation/evals.py output {conv_index: [{question, answer, response, category, bleu_score, f1_score, llm_score}]}"
    metrics = ["f1_mem0", "bleu1_mem0", "f1", "llm_judge", "llm_judge_majority"]
    stored_metrics = {"f1_score": "f1_mem0", "bleu_score": "bleu1_mem0"}

    def read(self, path: Path) -> list[ArtifactRow]:
        data = need_mapping(load_object(path), path, "{conversation index: [rows]}")
        out = []
        for key, idx, where, row in grouped_rows(data, path):
            label = label_value(row.get("llm_score"), path, where, "llm_score") if "llm_score" in row else None
            stored = {k: v for k in self.stored_metrics if (v := number_field(row, k, path, where)) is not None}
            out.append(ArtifactRow(conversation=str(key), conv_index=idx, location=where,
                                   question=text_field(row, "question", path, where, empty_ok=False),
                                   prediction=text_field(row, "response", path, where),
                                   labels=None if "llm_score" not in row else [label],
                                   category=row.get("category"), stored=stored, gold=row.get("answer")))
        return out
