"""``score predictions=FILE format=longmemeval dataset=longmemeval_sample``: LongMemEval's own hypothesis files
and evaluate_qa.py logs (written here against the shipped sample; never published files), matched by
question_id, the stored autoeval labels as ``llm_judge`` so the per-type accuracy equals
print_qa_metrics.py's arithmetic on the same file, unknown ids reported, malformed lines one line each."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from ctxbench.data.errors import DataError
from ctxbench.referee.formats import get_format
from ctxbench.referee.match import match_by_id
from ctxbench.referee.rows import ArtifactRow

SAMPLE = Path(__file__).resolve().parent.parent / "ctxbench" / "samples" / "longmemeval_sample.json"
JUDGE = "gpt-4o-2024-08-06"


def sample_entries() -> list[dict]:
    return json.loads(SAMPLE.read_text())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def eval_log(tmp_path: Path) -> tuple[Path, list[dict]]:
    """An evaluate_qa.py log over the sample: every question but the last, labels alternating by position,
    plus one row whose question_id the sample does not have."""
    rows = [{"question_id": e["question_id"], "hypothesis": f"answer {i}",
             "autoeval_label": {"model": JUDGE, "label": i % 3 != 1}} for i, e in enumerate(sample_entries()[:-1])]
    rows.append({"question_id": "not_in_the_sample", "hypothesis": "x", "autoeval_label": {"model": JUDGE, "label": True}})
    return write_jsonl(tmp_path / "hyp.jsonl.eval-results-gpt-4o", rows), rows


def print_qa_metrics(rows: list[dict], ref: list[dict]) -> dict:
    """print_qa_metrics.py's arithmetic (xiaowu0162/LongMemEval src/evaluation), over the rows the dataset
    has: per type the mean label, overall the mean over all rows, task-averaged the mean of the type means,
    abstention the mean over the ``_abs`` ids (which also count in their type)."""
    types = {e["question_id"]: e["question_type"] for e in ref}
    by_type: dict[str, list[int]] = {}
    abst = []
    for r in rows:
        if r["question_id"] not in types:
            continue
        lab = 1 if r["autoeval_label"]["label"] else 0
        by_type.setdefault(types[r["question_id"]], []).append(lab)
        if "_abs" in r["question_id"]:
            abst.append(lab)
    every = [v for vs in by_type.values() for v in vs]
    return {"by_type": {t: sum(v) / len(v) for t, v in by_type.items()}, "overall": sum(every) / len(every),
            "task_averaged": sum(sum(v) / len(v) for v in by_type.values()) / len(by_type),
            "abstention": sum(abst) / len(abst)}


def score(tmp_path: Path, artifact: Path, *extra: str):
    out = tmp_path / "run"
    proc = run_cli("score", f"predictions={artifact}", "format=longmemeval", "dataset=longmemeval_sample",
                   f"hydra.run.dir={out}", "progress=false", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    results = json.loads((out / "results.json").read_text())
    preds = [json.loads(ln) for ln in (out / "predictions.jsonl").read_text().splitlines()]
    return results, preds, (out / "results.md").read_text(), proc.stdout


def test_eval_log_reproduces_print_qa_metrics_per_type(tmp_path):
    path, rows = eval_log(tmp_path)
    want = print_qa_metrics(rows, sample_entries())
    results, preds, md, out = score(tmp_path, path)
    imp = results["import"]
    assert (imp["rows"], imp["matched"], imp["unmatched"]["n"], imp["missing"]["n"]) == (13, 12, 1, 1)
    assert imp["unmatched"]["rows"][0]["location"] == "line 13" and "not_in_the_sample" in imp["unmatched"]["rows"][0]["reason"]
    assert imp["missing"]["ids"] == [sample_entries()[-1]["question_id"]]
    assert results["judge"] == {"source": "artifact", "format": "longmemeval", "runs": 1, "models": [JUDGE]}
    for t, acc in want["by_type"].items():
        assert results["by_category"][t]["llm_judge"] == round(acc, 4), t  # print_qa_metrics prints round(., 4) too
    assert results["overall"]["llm_judge"] == round(want["overall"], 4)
    if "longmemeval" in results:  # the scoring block (helper lme-recall): the paper's three summaries
        block = results["longmemeval"]
        assert block["task_averaged"]["llm_judge"] == pytest.approx(want["task_averaged"], abs=1e-4)
        assert block["abstention"]["llm_judge"] == pytest.approx(want["abstention"], abs=1e-4)
    by_id = {p["id"]: p for p in preds}
    first = sample_entries()[0]
    assert by_id[first["question_id"]]["prediction"] == "answer 0"
    assert by_id[first["question_id"]]["answer"] == str(first["answer"])  # gold from the dataset, not the artifact
    assert "12 matched, 1 unmatched, 1 LongMemEval questions missing" in out
    assert "not_in_the_sample" in md


def test_hypothesis_file_without_labels_scores_without_a_judge(tmp_path):
    rows = [{"question_id": e["question_id"], "hypothesis": str(e["answer"])} for e in sample_entries()]
    results, preds, _, _ = score(tmp_path, write_jsonl(tmp_path / "hyp.jsonl", rows))
    assert results["import"]["matched"] == len(rows) and "judge" not in results
    assert results["overall"]["f1"] == pytest.approx(1.0)  # the gold itself as the hypothesis
    assert "llm_judge" not in results["overall"]


def test_a_json_list_is_read_as_evaluate_qa_reads_it(tmp_path):
    rows = [{"question_id": "a", "hypothesis": "x"}, {"question_id": "b", "hypothesis": 7}]
    (tmp_path / "h.json").write_text(json.dumps(rows))
    got = get_format("longmemeval")().read(tmp_path / "h.json")
    assert [(r.question_id, r.prediction, r.location, r.labels) for r in got] == [("a", "x", "[0]", None),
                                                                                 ("b", "7", "[1]", None)]


@pytest.mark.parametrize("line, where, field", [
    ('{"hypothesis": "x"}', "record line 2", "'question_id'"),
    ('{"question_id": "a"}', "record line 2", "'hypothesis'"),
    ('{"question_id": "a", "hypothesis": "x", "autoeval_label": {"model": "m"}}', "record line 2", "'autoeval_label.label'"),
    ('{"question_id": "a", "hypothesis": "x", "autoeval_label": {"model": "m", "label": "maybe"}}', "record line 2",
     "'autoeval_label.label'"),
    ('{"question_id": "a", "hypothesis": "x", "autoeval_label": true}', "record line 2", "'autoeval_label'"),
    ('{"question_id": "a", "hypothesis": ', "record line 2", None),
    ('["a"]', "record line 2", None),
])
def test_a_malformed_line_is_one_line_naming_file_line_and_field(tmp_path, line, where, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": "ok", "hypothesis": "fine"}\n' + line + "\n")
    with pytest.raises(DataError) as e:
        get_format("longmemeval")().read(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and where in msg
    assert field is None or f"field {field}" in msg


def test_cli_refuses_a_malformed_log_in_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": "demo_ssu_dog", "hypothesis": "Pepper", "autoeval_label": {"label": 2}}\n')
    proc = run_cli("score", f"predictions={bad}", "format=longmemeval", "dataset=longmemeval_sample",
                   f"hydra.run.dir={tmp_path / 'r'}")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "bad.jsonl" in ln]
    assert len(lines) == 1 and "line 1" in lines[0] and "autoeval_label.label" in lines[0]


def test_format_needs_the_longmemeval_dataset(tmp_path):
    path = write_jsonl(tmp_path / "h.jsonl", [{"question_id": "demo_ssu_dog", "hypothesis": "Pepper"}])
    proc = run_cli("score", f"predictions={path}", "format=longmemeval", "dataset=locomo_sample",
                   f"hydra.run.dir={tmp_path / 'r'}")
    assert proc.returncode != 0 and "dataset=longmemeval" in proc.stderr


def test_match_by_id_reports_duplicates_and_unknown_ids():
    from ctxbench.data.longmemeval import load_longmemeval_file

    samples = list(load_longmemeval_file(SAMPLE))
    qid = samples[0].questions[0].id

    def row(i: str, where: str) -> ArtifactRow:
        return ArtifactRow(conversation=i, conv_index=-1, location=where, question=i, prediction="p", question_id=i)

    res = match_by_id([row(qid, "line 1"), row(qid, "line 2"), row("zzz", "line 3")], samples)
    assert [m.question.id for m in res.matched] == [qid] and res.matched[0].conversation == samples[0].history.id
    assert [(u["location"], u["reason"].split(" (")[0]) for u in res.unmatched] == [
        ("line 2", "question already matched by an earlier row"), ("line 3", "question_id 'zzz' is not in the dataset file")]
    assert len(res.missing) == len(samples) - 1
