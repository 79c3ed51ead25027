"""``python -m ctxbench eval`` killed midway (SIGKILL) and rerun: it resumes, answering nothing twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_cli

ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1"}


def read_ids(path: Path) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text().splitlines() if x.strip()]


def test_eval_cli_killed_midway_resumes(tmp_path):
    """A real kill (SIGKILL) in the middle of an eval run, then a rerun in the same folder."""
    out = tmp_path / "run"
    args = ["eval", "memory=full_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false",
            "llm.context_window=384", "memory.max_new_tokens=24", "limit=16", "progress=false", f"hydra.run.dir={out}"]
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


