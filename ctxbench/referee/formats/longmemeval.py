"""``format=longmemeval``: LongMemEval's own output files, as published (xiaowu0162/LongMemEval).

- a hypothesis file: JSON lines ``{"question_id", "hypothesis"}`` (README "Testing Your System"; a JSON list
  of such objects is read too, as ``src/evaluation/evaluate_qa.py`` falls back to one);
- an evaluation log (``evaluate_qa.py``'s ``<hyp_file>.eval-results-<model>``): the same lines with
  ``"autoeval_label": {"model": "<judge model>", "label": true|false}``, the one judge label per question
  that ``print_qa_metrics.py`` averages per question type.

Rows carry no question text or type: they are matched to the dataset's questions by ``question_id``
(``dataset=longmemeval dataset.path=...``, :func:`ctxbench.referee.match.match_by_id`); the stored labels
become ``llm_judge`` (:mod:`ctxbench.referee.labels`), so the published per-type accuracy is reproduced
from the artifact. Other keys on a line are kept out of scoring. A malformed line is one
:class:`DataError` naming the file, the line and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxbench.core.registry import register
from ctxbench.data.errors import DataError
from ctxbench.data.records import short_repr
from ctxbench.referee.rows import ArtifactRow, label_value, need_row, text_field

LABEL = "autoeval_label"


@register("format", "longmemeval")
class LongMemEvalFormat:
    name = "longmemeval"
    description = ("LongMemEval hypothesis JSONL {question_id, hypothesis} or its evaluate_qa.py log "
                   "(+ autoeval_label {model, label}), matched by question_id to dataset=longmemeval")
    metrics = ["f1", "llm_judge"]
    stored_metrics: dict[str, str] = {}
    dataset = "longmemeval"  # rows name question ids: matched against dataset=longmemeval, not LoCoMo

    def read(self, path: Path) -> list[ArtifactRow]:
        return [self._row(obj, path, where) for where, obj in read_lines(path)]

    @staticmethod
    def _row(obj: Any, path: Path, where: str) -> ArtifactRow:
        row = need_row(obj, path, where)
        qid = text_field(row, "question_id", path, where, empty_ok=False)
        hyp = text_field(row, "hypothesis", path, where)
        labels, model = None, None
        if LABEL in row:
            lab = row[LABEL]
            if not isinstance(lab, dict):
                raise DataError(path, f"expected {{model, label}}, got {short_repr(lab)}", record=where, field=LABEL)
            if "label" not in lab:
                raise DataError(path, "missing required field", record=where, field=f"{LABEL}.label")
            labels = [label_value(lab["label"], path, where, f"{LABEL}.label")]
            model = lab.get("model")
            if model is not None and not isinstance(model, str):
                raise DataError(path, f"must be a string, got {short_repr(model)}", record=where, field=f"{LABEL}.model")
        return ArtifactRow(conversation=qid, conv_index=-1, location=where, question=qid, prediction=hyp,
                           labels=labels, question_id=qid, judge_model=model)


def read_lines(path: Path) -> list[tuple[str, Any]]:
    """(``line N``, object) per non-blank line of a JSON-lines file; a file holding one JSON list gives
    (``[i]``, object) per item. Bytes that are not UTF-8 or a line that is not JSON: one line naming it."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(path, "not UTF-8 text") from None
    except OSError as e:
        raise DataError(path, f"cannot read it ({e.strerror or e})") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise DataError(path, f"malformed JSON list ({getattr(e, 'msg', 'nested too deeply')})") from None
        if not isinstance(data, list):
            raise DataError(path, f"expected a JSON list of rows, got {type(data).__name__}")
        return [(f"[{i}]", obj) for i, obj in enumerate(data)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except (json.JSONDecodeError, RecursionError) as e:
            raise DataError(path, f"not a JSON object ({getattr(e, 'msg', 'nested too deeply')})",
                            record=f"line {n}") from None
    return out
