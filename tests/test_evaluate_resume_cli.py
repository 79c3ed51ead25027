"""``python -m ctxbench eval`` killed midway (SIGKILL) and rerun: it resumes, answering nothing twice;
rerun with another config or while another process uses the folder: refused in one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY_ANSWERS, run_cli

ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1"}


def read_ids(path: Path) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.process
def test_eval_cli_killed_midway_resumes(tmp_path):
    """A real kill (SIGKILL) in the middle of an eval run, then a rerun in the same folder."""
    out = tmp_path / "run"
    args = ["eval", "memory=full_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false", TINY_ANSWERS,
            "llm.context_window=384", "memory.max_new_tokens=24", "limit=16", "progress=false", f"hydra.run.dir={out}",
            "concurrency=1"]  # one answer at a time, so a kill lands between two (4 workers: test_eval_concurrency_cli)
    proc = subprocess.Popen([sys.executable, "-m", "ctxbench", *args], cwd=REPO, env={**os.environ, **ENV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pred = out / "predictions.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if pred.exists() and len(read_ids(pred)) >= 1:
            break
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(x) for x in pred.read_text().splitlines() if x.strip()]
    assert killed and 1 <= len(before) < 16, "the run should be killed midway"
    assert not (out / "results.json").exists()

    p = run_cli(*args, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    after = [json.loads(x) for x in pred.read_text().splitlines()]
    ids = [r["id"] for r in after]
    assert len(ids) == 16 and len(set(ids)) == 16
    for old in before:  # answered before the kill: kept as they were, not answered again
        new = next(r for r in after if r["id"] == old["id"])
        assert new["answer_seconds"] == old["answer_seconds"] and new["raw_prediction"] == old["raw_prediction"]
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == 16 and res["cost"]["n_questions"] == 16
    assert res["system"] == "memory=full_context" and res["dataset"] == "locomo_sample"
    assert (out / "results.md").exists()




# ---- a run folder is bound to its config and to one process (issue 14) ----------------------------

SMALL = ["eval", "memory=no_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false", "limit=2",
         "progress=false", TINY_ANSWERS]


def test_eval_cli_refuses_to_resume_a_folder_made_with_another_config(tmp_path):
    """Today's bug: a changed memory setting resumed into an old folder answered nothing and rewrote
    results.json with the old numbers under the new config. Now it is refused, and nothing is touched."""
    out = tmp_path / "run"
    first = run_cli(*SMALL, "memory.max_new_tokens=8", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    results, preds = (out / "results.json").read_bytes(), (out / "predictions.jsonl").read_bytes()

    p = run_cli(*SMALL, "memory.max_new_tokens=4", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == (
        f"ctxbench: error: {out} was run with a different config: memory.max_new_tokens 8 → 4 "
        "(use a new hydra.run.dir, or pass force_resume=true to reuse it)")
    assert (out / "results.json").read_bytes() == results and (out / "predictions.jsonl").read_bytes() == preds

    more = run_cli(*SMALL, "memory.max_new_tokens=8", "limit=3", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]  # a larger limit only answers more questions
    assert len(read_ids(out / "predictions.jsonl")) == 3

    forced = run_cli(*SMALL, "memory.max_new_tokens=4", "force_resume=true", f"hydra.run.dir={out}", env=ENV,
                     timeout=300)
    assert forced.returncode == 0, forced.stderr[-2000:]
    rec = json.loads((out / ".ctxbench" / "run.json").read_text())
    assert rec["config"]["memory"]["max_new_tokens"] == 4 and len(rec["previous_fingerprints"]) == 1


def test_eval_cli_refuses_a_folder_another_process_is_using(tmp_path):
    out = tmp_path / "run"
    hold = ("import sys, time; from ctxbench.runs.guard import acquire_lock; acquire_lock(sys.argv[1]); "
            "print('held', flush=True); time.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        p = run_cli(*SMALL, f"hydra.run.dir={out}", env=ENV, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == (
        f"ctxbench: error: {out} is in use by another ctxbench process (pid {holder.pid}); "
        "wait for it or use another hydra.run.dir")
    assert not (out / "predictions.jsonl").exists()


@pytest.mark.parametrize("line,what", [
    ('["q1", "an answer"]', "expected a JSON object, got a JSON list"),
    ('"q1"', "expected a JSON object, got a JSON string"),
    ('{"prediction": "x", "answer": "y"}', "field 'id': missing required field"),
])
def test_resume_read_of_a_bad_prediction_line_names_file_and_line(tmp_path, line, what):
    from ctxbench.data.errors import DataError
    from ctxbench.evaluation.evaluator import run_system
    from ctxbench.memory.baselines import NoContext

    pred = tmp_path / "predictions.jsonl"
    pred.write_text(json.dumps({"id": "q0", "prediction": "p"}) + "\n" + line + "\n"
                    + json.dumps({"id": "q2", "prediction": "p"}) + "\n")
    with pytest.raises(DataError) as e:
        run_system(NoContext({}, llm=None), [], tmp_path, progress=False)
    assert str(e.value).startswith(f"{pred}, record line 2") and what in str(e.value)
