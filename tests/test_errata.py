"""``dataset.errata=FILE``: published errata of the gold answers (ctxbench/data/errata.py), every run
scored under the original and the corrected gold, the ceiling stated; and LoCoMo's category ids
checked by count (ctxbench/data/categories.py ``category_fit``)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.data.categories import LOCOMO_COUNTS, category_fit
from ctxbench.data.errata import load_errata, read_errata
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file
from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.memory.baselines import FullContext

from conftest import REPO, TINY_ANSWERS, run_cli
from scripted_llm import ScriptedLLM

SAMPLE = REPO / "data" / "samples" / "locomo_sample.json"
# Rows in locomo-audit's errors.json shape, against the shipped sample (demo-1 is the file's
# conversation 0, demo-2 its conversation 1). Cat 4 single-hop: 7 questions; cat 2 temporal: 3.
ROWS = [
    {"question_id": "locomo_0_qa1", "question": "What class did Ben start?", "golden_answer": "pottery",
     "category": 4, "error_type": "HALLUCINATION", "reasoning": "...", "correct_answer": "ceramics"},
    {"question_id": "demo-2-q0", "golden_answer": "at the botanical garden", "error_type": "ATTRIBUTION_ERROR",
     "correct_answer": "in a bookshop"},
    {"question_id": "locomo_0_qa0", "golden_answer": "14 April 2024", "error_type": "WRONG_CITATION",
     "correct_answer": "14 April 2024 (answer is correct, citation is wrong)"},
    {"question_id": "locomo_0_qa3", "golden_answer": 16, "error_type": "AMBIGUOUS", "correct_answer": "16"},
    {"question_id": "locomo_1_qa1", "golden_answer": "Osaka", "error_type": "HALLUCINATION", "correct_answer": "Nara"},
    {"question_id": "locomo_1_qa2", "question": "Which orchid?", "golden_answer": "it bloomed for the first time "
     "in eleven years", "error_type": "INCOMPLETE", "correct_answer": "it bloomed"},
    {"question_id": "locomo_7_qa0", "golden_answer": "x", "error_type": "HALLUCINATION", "correct_answer": "y"},
]


def write(path: Path, rows) -> Path:
    path.write_text(json.dumps(rows))
    return path


def sample_dataset(**kw):
    return registry.build("dataset", option_config("dataset", {"name": "locomo_sample", "path": str(SAMPLE), **kw}))


def test_errata_rows_are_applied_reported_or_left(tmp_path):
    er = load_errata(write(tmp_path / "errata.json", ROWS), load_locomo_file(SAMPLE))
    assert sorted(er.corrections) == ["demo-1-q1", "demo-2-q0"]  # locomo_0_qa1 = the file's conversation 0, qa[1]
    assert er.corrections["demo-1-q1"].answer == "ceramics" and er.corrections["demo-1-q1"].kind == "HALLUCINATION"
    assert dict(er.outcomes) == {"applied": 2, "citation_only": 1, "unchanged": 1, "mismatched": 2, "unknown": 1}
    bad = {(r["question_id"], r["field"]) for r in er.mismatched}
    assert bad == {("locomo_1_qa1", "golden_answer"), ("locomo_1_qa2", "question")}
    assert er.unknown == [{"row": 6, "question_id": "locomo_7_qa0"}]
    # the ceiling: 2 of the 10 questions of the audited categories (4 single-hop, 2 temporal) marked wrong
    c = er.ceiling()
    assert (c["n"], c["marked"], c["ceiling"]) == (10, 2, 0.8)
    assert c["categories"]["single-hop"] == {"id": 4, "n": 7, "marked": 2, "ceiling": round(5 / 7, 4)}
    assert c["categories"]["temporal"]["ceiling"] == 1.0


@pytest.mark.parametrize("rows, where", [
    ({"question_id": "x"}, "expected a JSON list of errata rows"),
    ([ROWS[0], {k: v for k, v in ROWS[1].items() if k != "correct_answer"}], "row 1, field 'correct_answer'"),
    ([ROWS[0], dict(ROWS[1], error_type=3)], "row 1, field 'error_type'"),
    ([ROWS[0], dict(ROWS[1], question_id="locomo_0_qa1")], "row 1, field 'question_id'"),
    ([dict(ROWS[0], golden_answer="  ")], "row 0, field 'golden_answer'"),
    (["not an object"], "row 0"),
])
def test_a_bad_errata_file_is_one_line_naming_file_row_and_field(tmp_path, rows, where):
    path = write(tmp_path / "bad.json", rows)
    with pytest.raises(DataError) as e:
        read_errata(path)
    assert str(path) in str(e.value) and where in str(e.value) and "\n" not in str(e.value)


def test_score_cli_scores_under_the_original_and_the_corrected_gold(tmp_path):
    preds = []
    for s in sample_dataset():
        for q in s.questions:
            preds.append({"id": q.id, "prediction": q.answer, "answer": q.answer, "category": q.category})
    pred = tmp_path / "preds.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in preds))
    out = tmp_path / "scored"
    p = run_cli("score", f"predictions={pred}", "dataset=locomo_sample",
                f"dataset.errata={write(tmp_path / 'errata.json', ROWS)}", "progress=false", f"hydra.run.dir={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "f1@corrected=" in p.stdout and "3 of 7 errata rows do not fit the dataset" in p.stdout + p.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["bleu1"] == 1.0  # predicting the original gold: perfect under it ...
    fixed = res["corrected"]
    assert fixed["changed"] == 2 and fixed["by_category"]["single-hop"]["bleu1"] == round(5 / 7, 4)  # ... not here
    assert fixed["overall"]["bleu1"] == round(14 / 16, 4) and fixed["by_category"]["temporal"]["bleu1"] == 1.0
    assert fixed["errata"]["applied"] == 2 and fixed["errata"]["mismatched"] == 2 and fixed["ceiling"]["ceiling"] == 0.8
    rows = {r["id"]: r for r in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())}
    assert rows["demo-1-q1"]["corrected"] == {"answer": "ceramics", "error_type": "HALLUCINATION", "f1": 0.0,
                                              "f1_set": 0.0, "bleu1": 0.0, "rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    assert "corrected" not in rows["demo-1-q0"]  # citation-only: the gold stands
    md = (out / "results.md").read_text()
    assert "## Under the corrected gold" in md and "**Ceiling: 80.00%**" in md and "2 of 10 gold answers" in md
    assert "row 4 `locomo_1_qa1`: golden_answer 'Osaka' is 'Kyoto' in the dataset" in md


def test_eval_scores_a_run_under_the_corrected_gold(tmp_path):
    samples = sample_dataset(errata=str(write(tmp_path / "errata.json", ROWS[:2])))
    llm = ScriptedLLM("pottery")
    res = evaluate_samples(FullContext(option_config("memory", {"name": "full_context"}), llm=llm), samples,
                           tmp_path / "run", llm=llm, metrics=["f1"])
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "predictions.jsonl").read_text().splitlines())}
    assert recs["demo-1-q1"]["f1"] == 1.0 and recs["demo-1-q1"]["corrected"]["f1"] == 0.0
    single = res["by_category"]["single-hop"]["f1"]
    assert res["corrected"]["by_category"]["single-hop"]["f1"] == round(single - 1 / 7, 4)
    assert res["corrected"]["by_category"]["temporal"] == res["by_category"]["temporal"]


def test_eval_cli_takes_dataset_errata(tmp_path):
    out = tmp_path / "run"
    p = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false",
                TINY_ANSWERS, "limit=2", "metrics=[f1]", "progress=false",
                f"dataset.errata={write(tmp_path / 'errata.json', ROWS[:1])}", f"hydra.run.dir={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["corrected"]["changed"] == 1 and res["corrected"]["errata"]["applied"] == 1
    assert res["corrected"]["ceiling"] == {"n": 1, "marked": 1, "ceiling": 0.0, "categories": {
        "single-hop": {"id": 4, "n": 1, "marked": 1, "ceiling": 0.0}}}  # limit=2 per conversation: demo-1-q1 only


def test_errata_ids_count_the_conversations_of_the_whole_file(shared_data, tmp_path):
    raw = json.loads((shared_data / "locomo10.json").read_text())
    q = raw[3]["qa"][5]
    rows = [{"question_id": "locomo_3_qa5", "golden_answer": q["answer"], "error_type": "TEMPORAL_ERROR",
             "question": q["question"], "correct_answer": "something else"}]
    samples = registry.build("dataset", option_config("dataset", {
        "name": "locomo", "path": str(shared_data / "locomo10.json"), "conversations": [raw[3]["sample_id"]],
        "errata": str(write(tmp_path / "e.json", rows))}))
    assert list(samples.errata.corrections) == [f"{raw[3]['sample_id']}-q5"]
    assert samples.errata.ceiling()["n"] == sum(1 for c in raw for x in c["qa"] if x["category"] == q["category"])


# ---- category ids by count ---------------------------------------------------------------------------

def test_category_fit_verdicts():
    assert category_fit(LOCOMO_COUNTS).verdict == "fits"
    four = category_fit({"1": 282, "2": 321, "3": 96, "4": 841})  # an artifact without adversarial questions
    assert four.fits and "5 adversarial" in four.line
    assert category_fit({"multi-hop": 282, "single-hop": 841}).fits  # names are read as their ids
    swapped = category_fit({1: 282, 2: 96, 3: 321, 4: 841, 5: 446})  # Zep's README: temporal <-> open-domain
    assert swapped.verdict == "relabelled" and swapped.relabel == {1: 1, 2: 3, 3: 2, 4: 4, 5: 5}
    assert "id 2 has 96 questions (LoCoMo's 3 open-domain)" in swapped.line
    cut = category_fit({1: 28, 2: 32, 3: 9, 4: 84})
    assert cut.verdict == "mismatch" and "id 1: 28 (LoCoMo 282)" in cut.line


def test_the_full_locomo_fits_and_a_relabelled_copy_is_warned_about(shared_data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ctxbench.data.locomo"):
        load_locomo_file(shared_data / "locomo10.json")
    assert not [r for r in caplog.records if "category" in r.getMessage()]
    raw = json.loads((shared_data / "locomo10.json").read_text())
    for conv in raw:
        for q in conv["qa"]:
            q["category"] = {2: 3, 3: 2}.get(q["category"], q["category"])
    copy = write(tmp_path / "relabelled.json", raw)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ctxbench.data.locomo"):
        load_locomo_file(copy)
    lines = [r.getMessage() for r in caplog.records if "category" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and str(copy) in lines[0] and "look relabelled" in lines[0]
    assert "id 2 has 96 questions (LoCoMo's 3 open-domain)" in lines[0]


def test_errata_are_scoring_only_so_a_run_folder_resumes_with_them(tmp_path):
    from omegaconf import OmegaConf

    from ctxbench.runs import guard

    run = tmp_path / "run"
    run.mkdir()
    base = {"seed": 0, "dataset": {"name": "locomo_sample", "path": str(SAMPLE), "errata": None}}
    guard.claim(run, OmegaConf.create(base))
    base["dataset"]["errata"] = str(tmp_path / "errata.json")
    guard.claim(run, OmegaConf.create(base))  # no "different config" refusal: the answers do not change
    guard.release_lock(run)
