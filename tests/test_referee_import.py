"""``score predictions=FILE format=NAME``: published artifacts read, matched to LoCoMo, judged from their
stored labels, their stored scores reproduced (issue 38 part 1). Samples: tests/data/referee/ (written for
these tests: a two-conversation LoCoMo file and one artifact per format, never published files)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from ctxbench.data.errors import DataError
from ctxbench.metrics.mem0_exact import mem0_bleu1, mem0_f1, word_tokenize
from ctxbench.metrics.qa import word_tokens
from ctxbench.referee.categories import check_labels
from ctxbench.referee.formats import format_names, get_format
from ctxbench.referee.match import normalise_question

DATA = Path(__file__).parent / "data" / "referee"
LOCOMO = DATA / "locomo_tiny.json"


def score(tmp_path: Path, artifact: str, fmt: str, *extra: str) -> tuple[dict, list[dict], str, str]:
    out = tmp_path / "run"
    proc = run_cli("score", f"predictions={DATA / artifact}", f"format={fmt}", "dataset=locomo",
                   f"dataset.path={LOCOMO}", f"hydra.run.dir={out}", "progress=false", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    results = json.loads((out / "results.json").read_text())
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return results, preds, (out / "results.md").read_text(), proc.stdout


def test_registry_lists_every_format_and_config_choices_match():
    from ctxbench.config.schemas.commands import ScoreConfig
    import dataclasses

    choices = next(f for f in dataclasses.fields(ScoreConfig) if f.name == "format").metadata["choices"]
    assert sorted(choices) == format_names() == ["ctxbench", "evermemos", "longmemeval", "mem0", "zep"]
    assert "question_id" in get_format("longmemeval").description  # readable now (tests/test_referee_longmemeval.py)


def test_mem0_tokenization_reproduces_mem0_not_installed_nltk():
    # mem0's code (nltk 3.9.1 word_tokenize): "'the" stays one token, so 2 of 4 tokens match → 0.5
    assert word_tokenize("'the lean startup'") == ["'the", "lean", "startup", "'"]
    assert mem0_bleu1("'The Lean Startup'", "The Lean Startup") == pytest.approx(0.5)
    assert word_tokens("'the lean startup'") == ["'", "the", "lean", "startup", "'"]  # bleu1's tokens: 0.6
    # Punkt (shipped English parameters): "Dr." is an abbreviation, "home." ends a sentence
    assert word_tokenize("i met dr. smith at home. then left.") == [
        "i", "met", "dr.", "smith", "at", "home", ".", "then", "left", "."]
    assert mem0_f1("", "x") == 0.0 and mem0_f1("Sweden!", "sweden") == 1.0


def test_mem0_import_matches_scores_and_reports(tmp_path):
    results, preds, md, out = score(tmp_path, "mem0_results.json", "mem0")
    imp = results["import"]
    assert imp["rows"] == 6 and imp["matched"] == 5
    assert imp["unmatched"]["n"] == 1
    assert imp["unmatched"]["rows"][0]["location"] == "0[4]"
    assert "What car does Ann drive?" in imp["unmatched"]["rows"][0]["question"]
    assert imp["missing"]["n"] == 3  # library (open-domain), the adversarial one, "When did Cid move?"
    assert imp["missing"]["by_category"] == {"open-domain": 1, "adversarial": 1, "temporal": 1}
    # the repeated question "What did Ann read?": k-th row → k-th LoCoMo question
    amb = {r["location"]: r["matched"] for r in imp["ambiguous"]["rows"]}
    assert amb == {"0[2]": "tiny-a-q3", "0[3]": "tiny-a-q4"}
    by_id = {p["id"]: p for p in preds}
    assert by_id["tiny-a-q3"]["answer"] == "A book" and by_id["tiny-a-q4"]["answer"] == "The Lean Startup"
    # gold/category come from LoCoMo; the row with "Where does Cid  live" (spacing, no '?') matched
    assert by_id["tiny-b-q0"]["category_name"] == "single-hop"
    line = by_id["tiny-a-q0"]
    for key in ("question", "prediction", "answer", "category", "f1_mem0", "bleu1_mem0", "f1", "llm_judge"):
        assert key in line, key
    assert line["bleu1_mem0"] == 0.5
    st = imp["stored_scores"]
    assert st["f1_score"]["rows_over_tolerance"] == 0
    assert st["bleu_score"]["rows_over_tolerance"] == 1 and st["bleu_score"]["over"][0]["id"] == "tiny-a-q1"
    assert results["judge"] == {"source": "artifact", "format": "mem0", "runs": 1}
    assert results["overall"]["llm_judge"] == pytest.approx(0.8)  # 4 of the 5 matched rows labelled 1
    assert "Unmatched rows (1)" in md and "What car does Ann drive?" in md
    assert "1 unmatched" in out and "category labels: consistent" in out


def test_swapped_category_labels_reported(tmp_path):
    results, preds, md, out = score(tmp_path, "zep_grades_swapped.json", "zep")
    cl = results["import"]["category_labels"]
    assert cl["verdict"] == "swapped mapping"
    assert cl["mapping"] == {"2": "open-domain", "3": "temporal"}
    assert "SWAPPED" in out
    assert {p["id"]: p["category_name"] for p in preds}["tiny-b-q1"] == "temporal"  # LoCoMo's, not the artifact's


def test_category_check_verdicts():
    assert check_labels([("1", "multi-hop"), (2, "temporal")])["verdict"] == "consistent"
    assert check_labels([("single_hop", "single-hop")])["verdict"] == "consistent"
    assert check_labels([("2", "temporal"), ("2", "single-hop")])["verdict"] == "inconsistent"
    assert check_labels([])["verdict"] == "absent"


def test_evermemos_runs_mean_std_majority(tmp_path):
    results, preds, md, out = score(tmp_path, "evermemos_eval_results.json", "evermemos")
    by_id = {p["id"]: p for p in preds}
    # question_id qa4 / qa3 settle the repeated question whatever the row order
    assert by_id["tiny-a-q4"]["prediction"] == "The Lean Startup" and by_id["tiny-a-q3"]["prediction"] == "a novel"
    assert by_id["tiny-a-q4"]["llm_judge_runs"] == [1.0, 1.0, 0.0]
    assert by_id["tiny-a-q4"]["llm_judge"] == pytest.approx(2 / 3, abs=1e-6)
    assert by_id["tiny-a-q4"]["llm_judge_majority"] == 1.0 and by_id["tiny-a-q3"]["llm_judge_majority"] == 0.0
    ov = results["overall"]
    # runs: [T,T,T,F], [T,F,T,T], [F,F,T,F] over 4 questions → per-run means .75 .75 .25
    assert ov["llm_judge"] == pytest.approx((0.75 + 0.75 + 0.25) / 3, abs=1e-4)
    # EverMemOS's np.std of the per-run accuracies (ddof 0), as its std_accuracy; the sample std would be 0.288675
    assert ov["llm_judge_std"] == pytest.approx(0.235702, abs=1e-4)
    assert results["metric_runs"]["llm_judge"]["std"]["ddof"] == 0
    assert ov["llm_judge_majority"] == pytest.approx(0.5)  # q4 and q1 have ≥ 2 of 3
    assert results["metric_runs"]["llm_judge"]["overall"] == [0.75, 0.75, 0.25]
    assert results["judge"]["runs"] == 3
    # Cid's row is labelled "1" (multi-hop) but LoCoMo says single-hop: one label spans two categories
    assert results["import"]["category_labels"]["verdict"] == "inconsistent"


def test_bad_shape_is_one_line_naming_file_and_key(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"0": {"question": "x"}}))
    with pytest.raises(DataError, match=r"bad\.json, field '0': expected a list of question rows"):
        get_format("mem0")().read(bad)
    bad.write_text(json.dumps({"detailed": {}}))
    with pytest.raises(DataError, match=r"bad\.json, field 'detailed_results': missing required field"):
        get_format("evermemos")().read(bad)
    bad.write_text(json.dumps({"locomo_experiment_user_0": [{"question": "q", "answer": "a", "grade": "maybe"}]}))
    with pytest.raises(DataError, match=r"record locomo_experiment_user_0\[0\], field 'grade'"):
        get_format("zep")().read(bad)
    out = tmp_path / "run"
    proc = run_cli("score", f"predictions={bad}", "format=zep", "dataset=locomo", f"dataset.path={LOCOMO}",
                   f"hydra.run.dir={out}")
    assert proc.returncode != 0
    assert "bad.json" in proc.stderr and "'grade'" in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if "bad.json" in ln]) == 1


def test_format_needs_dataset(tmp_path):
    proc = run_cli("score", f"predictions={DATA / 'mem0_results.json'}", "format=mem0",
                   f"hydra.run.dir={tmp_path / 'r'}")
    assert proc.returncode != 0 and "dataset=locomo" in proc.stderr


def test_normalise_question():
    assert normalise_question("What’s  Ann's book?") == normalise_question("what's ann's book")
