"""``python -m ctxbench score`` and ``eval`` end to end, as a user runs them (subprocesses)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1"}

# Hand-computed LoCoMo F1 for each line (see tests/test_metrics.py for the arithmetic).
LINES = [
    ({"id": "a", "prediction": "hiking, painting", "answer": "painting, swimming, hiking", "category": 1}, 2 / 3),
    ({"id": "b", "prediction": "in 2022", "answer": 2022, "category": 2}, 2 / 3),
    ({"id": "c", "prediction": "yes", "answer": "Yes; she likes hiking", "category": 3}, 1.0),
    ({"id": "d", "prediction": "The cat sat, on the mat.", "answer": "A cat on a mat", "category": 4}, 6 / 7),
    ({"id": "e", "prediction": "Not mentioned in the conversation", "adversarial_answer": "a boat",
      "category": 5}, 1.0),
    ({"id": "f", "prediction": "a boat", "answer": "Not mentioned in the conversation", "category": 5}, 0.0),
]


def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_score_cli_reproduces_locomo_f1(tmp_path):
    pred = write_lines(tmp_path / "theirs.jsonl", [r for r, _ in LINES])
    out = tmp_path / "scored"
    p = run_cli("score", f"predictions={pred}", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    by = res["by_category"]
    assert list(by) == ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"]
    assert by["multi-hop"] == pytest.approx({**by["multi-hop"], "id": 1, "n": 1, "f1": round(2 / 3, 4)})
    assert by["open-domain"]["f1"] == 1.0 and by["single-hop"]["f1"] == round(6 / 7, 4)
    assert by["adversarial"]["n"] == 2 and by["adversarial"]["f1"] == 0.5
    assert res["overall"]["n"] == 6
    assert res["overall"]["f1"] == pytest.approx(sum(v for _, v in LINES) / 6, abs=1e-4)
    for m in ("f1_set", "bleu1", "rouge1", "rouge2", "rougeL"):
        assert m in res["overall"] and res["metrics"][m]["version"]
    assert res["config"]["predictions"] == str(pred) and "commit" in res["git"]
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list("abcdef")
    assert [r["f1"] for r in rows] == pytest.approx([v for _, v in LINES], abs=1e-6)
    assert rows[4]["adversarial_answer"] == "a boat" and rows[0]["category_name"] == "multi-hop"
    assert "| multi-hop | 1 | 1 |" in (out / "results.md").read_text()


def test_score_cli_names_file_line_and_field_of_bad_input(tmp_path):
    good = LINES[0][0]
    bad = write_lines(tmp_path / "bad.jsonl", [good, {"id": "x", "answer": "y", "category": 4}])
    p = run_cli("score", f"predictions={bad}", f"hydra.run.dir={tmp_path / 'o1'}", env=ENV, timeout=300)
    assert p.returncode == 2
    assert str(bad) in p.stderr and "line 2" in p.stderr and "'prediction'" in p.stderr


@pytest.mark.parametrize("row,field", [
    ('{"id": "z", "predic', None),
    ({"id": "x", "prediction": None, "answer": "y", "category": 4}, "prediction"),
    ({"id": "x", "prediction": "p", "category": 4}, "answer"),
    ({"id": "x", "prediction": "p", "answer": "y"}, "category"),
    ({"id": ["x"], "prediction": "p", "answer": "y", "category": 4}, "id"),
    ([1, 2], None),
])
def test_prediction_file_errors_name_line_and_field(tmp_path, row, field):
    from ctxbench.data.errors import DataError
    from ctxbench.evaluation.evaluator import load_prediction_file

    path = write_lines(tmp_path / "p.jsonl", [LINES[0][0], row])
    with pytest.raises(DataError) as e:
        load_prediction_file(path)
    assert str(path) in str(e.value) and "line 2" in str(e.value)
    assert e.value.field == field


def read_ids(path: Path) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_eval_full_context_locomo_conv26_packaged_model(tmp_path, shared_data):
    """The issue's command on the packaged SmolLM2-135M (CPU, a few minutes)."""
    out = tmp_path / "conv26"
    p = run_cli("eval", "memory=full_context", "dataset=locomo", f"dataset.path={shared_data / 'locomo10.json'}",
                "dataset.conversations=[conv-26]", "dataset.limit=20", "llm.cache=false",
                f"hydra.run.dir={out}", env=ENV, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == 20 and len(read_ids(out / "predictions.jsonl")) == 20
    cost = res["cost"]
    assert cost["held_per_question"]["text"] > 1000  # conv-26 (~26k tokens) cut to the 2048 window
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(r["usage"]["extra"]["truncated_turns"] > 0 for r in rows)
    assert all(r["usage"]["answer_prompt_tokens"] <= 2048 for r in rows)
    print(json.dumps({"overall": res["overall"], "by_category": res["by_category"], "cost": cost}, indent=1))
