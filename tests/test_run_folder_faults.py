"""Run folders under faults a real run meets (issue 37): nothing lost, nothing written outside the folder,
no one else's files taken for this run's.

- ``export out=DIR`` replaces a folder only when it provably is an earlier export (its manifest checks out);
- symbolic links inside a run folder are refused before anything is opened, and run files are never
  opened through one (``O_NOFOLLOW``);
- a rerun with a lower ``limit`` keeps every answer already paid for (unscored), and a higher one takes
  them up again without asking twice;
- results files with no run record beside them are refused (``force_resume=true`` adopts them).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.evaluation.shard import merge_records
from ctxbench.runs import guard as run_guard
from ctxbench.runs.guard import RunFolderError, claim
from ctxbench.runs.results import JsonlAppender, atomic_write_text
from ctxbench.training import checkpoint as ck
from tests.scripted_llm import ScriptedLLM
from tests.test_evaluate import Counting, oracle, samples
from tests.test_run_guard import run  # noqa: F401 - the run folder fixture (locked, released after)

CFG = {"seed": 0, "limit": 5, "force_resume": False, "memory": {"name": "rag", "k": 10}}


def cfg(**over):
    return OmegaConf.create({**CFG, **over})


def one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ---- export out=DIR -------------------------------------------------------------------------------

@pytest.fixture
def checkpoint(tmp_path):
    ck.save_checkpoint(tmp_path / "train" / "checkpoints", 1, trainable={"w": torch.ones(3)},
                       method_config={"name": "lm"}, model_config={"name": "tiny"})
    return tmp_path / "train"


def test_export_keeps_a_folder_that_merely_holds_an_export_json(cli, tmp_path, checkpoint):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "export.json").write_text("{}")
    (out / "thesis.tex").write_text("years of work")
    r = cli("export", f"checkpoint={checkpoint}", f"out={out}")
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert line.startswith("ctxbench: error:") and str(out) in line and "not an earlier export" in line
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "thesis.tex"]
    assert (out / "thesis.tex").read_text() == "years of work"


def test_only_a_sealed_export_with_nothing_else_in_it_is_replaced(tmp_path):
    from ctxbench.export import FORMAT, ExportError, check_target

    out = tmp_path / "export"
    out.mkdir()
    (out / "export.json").write_text(json.dumps({"format": FORMAT}))
    (out / "README.md").write_text("an export")
    ck.write_manifest(out)
    check_target(out)  # provably an earlier export: may be replaced
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="notes.txt is not in its MANIFEST.json"):
        check_target(out)
    (out / "notes.txt").unlink()
    (out / "README.md").write_text("edited")
    with pytest.raises(ExportError, match="README.md"):
        check_target(out)


def test_export_out_below_a_file_is_one_line_and_writes_nothing(cli, tmp_path, checkpoint):
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    r = cli("export", f"checkpoint={checkpoint}", f"out={tmp_path / 'afile' / 'sub' / 'deeper'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = one_line(r.stderr)
    assert f"{tmp_path / 'afile'} is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "afile").read_text() == "x"


# ---- symbolic links inside a run folder ------------------------------------------------------------

@pytest.mark.parametrize("rel", [".ctxbench/lock", "predictions.jsonl", "samples.jsonl", "metrics.jsonl",
                                 "h1/stores/records.sqlite", "checkpoints/step_0000002"])
def test_a_link_inside_the_run_folder_is_refused_before_anything_is_opened(run, tmp_path, rel):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    link = run / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    with pytest.raises(RunFolderError, match="is a symbolic link") as e:
        claim(run, cfg())
    assert str(link) in str(e.value) and str(outside) in str(e.value) and "\n" not in str(e.value)
    assert outside.read_text() == "precious\n"
    assert not (run / ".ctxbench" / "run.json").exists()


def test_a_run_folder_reached_through_a_linked_parent_is_fine(tmp_path):
    (tmp_path / "data" / "outputs").mkdir(parents=True)
    (tmp_path / "outputs").symlink_to(tmp_path / "data" / "outputs")
    run = tmp_path / "outputs" / "run"
    run.mkdir()
    try:
        claim(run, cfg())
        assert (tmp_path / "data" / "outputs" / "run" / ".ctxbench" / "run.json").exists()
    finally:
        run_guard.release_lock(run)


def test_run_files_are_never_opened_through_a_link(tmp_path):
    """A link made after the claim (while the run is on): appends refuse it, atomic writes replace the link."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    link = tmp_path / "predictions.jsonl"
    link.symlink_to(outside)
    with pytest.raises(RunFolderError, match="is a symbolic link"):
        JsonlAppender(link)
    atomic_write_text(link, "new\n")
    assert outside.read_text() == "precious\n" and not link.is_symlink() and link.read_text() == "new\n"
    lock = tmp_path / "run" / ".ctxbench" / "lock"
    lock.parent.mkdir(parents=True)
    lock.symlink_to(outside)
    with pytest.raises(RunFolderError, match="lock"):
        run_guard.acquire_lock(tmp_path / "run")
    assert outside.read_text() == "precious\n"


# ---- results files with no run record ------------------------------------------------------------

@pytest.mark.parametrize("name", ["predictions.jsonl", "predictions.rank1.jsonl", "results.json", "checkpoints"])
def test_results_without_a_run_record_are_refused_and_adopted_only_when_forced(run, name):
    p = run / name
    p.mkdir() if name == "checkpoints" else p.write_text('{"id": "q1", "prediction": "theirs"}\n')
    with pytest.raises(RunFolderError, match="no run record") as e:
        claim(run, cfg())
    msg = str(e.value)
    assert name in msg and "force_resume=true" in msg and "move them away" in msg and "\n" not in msg
    assert not (run / ".ctxbench" / "run.json").exists()
    claim(run, cfg(force_resume=True))  # adopted knowingly: the config is recorded, the run marked forced
    assert (run / ".ctxbench" / "run.json").exists() and run_guard.forced(run)
    claim(run, cfg())  # from now on the folder is this config's


def test_a_fresh_folder_and_a_recorded_one_are_claimed(run):
    claim(run, cfg())
    (run / "predictions.jsonl").write_text("")
    run_guard.release_lock(run)
    claim(run, cfg())


# ---- a lower limit on a rerun --------------------------------------------------------------------

def lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_a_lower_limit_keeps_the_answers_paid_for_and_a_higher_one_does_not_pay_twice(tmp_path):
    run = tmp_path / "run"
    full = evaluate_samples(Counting(ScriptedLLM(oracle)), samples(), run, limit=6, metrics=["f1"])
    assert full["kept_not_scored"] == 0
    ids = [r["id"] for r in lines(run / "predictions.jsonl")]
    assert len(ids) == 6

    llm = ScriptedLLM(oracle)
    res = evaluate_samples(Counting(llm), samples(), run, llm=llm, limit=2, metrics=["f1"])
    assert llm.calls == [] and res["overall"]["n"] == 2 and res["kept_not_scored"] == 4
    assert [r["id"] for r in lines(run / "predictions.jsonl")] == ids  # every answer kept, planned ones first
    assert "4 more answered questions" in (run / "results.md").read_text()

    llm = ScriptedLLM(oracle)
    system = Counting(llm)
    res = evaluate_samples(system, samples(), run, llm=llm, limit=6, metrics=["f1"])
    assert llm.calls == [] and system.answered == 0 and res["kept_not_scored"] == 0
    assert res["overall"] == full["overall"]


def test_merging_the_ranks_keeps_answers_outside_the_plan(tmp_path):
    rec = lambda q: {"id": q, "prediction": q}  # noqa: E731
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(rec(q)) + "\n" for q in "abcd"))
    (tmp_path / "predictions.rank1.jsonl").write_text(json.dumps(rec("e")) + "\n")
    rows = merge_records(tmp_path, [rec("a"), rec("e")], ["a", "e"])
    assert [r["id"] for r in rows] == ["a", "e"]
    assert [r["id"] for r in lines(tmp_path / "predictions.jsonl")] == ["a", "e", "b", "c", "d"]
    assert not list(tmp_path.glob("predictions.rank*.jsonl"))
