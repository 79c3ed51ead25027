"""kill -9 in the middle of real work, then rerun: nothing lost, nothing done twice, same results."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY_ANSWERS, run_cli


def _losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            assert rec["step"] not in out, f"step {rec['step']} logged twice"
            out[rec["step"]] = rec["loss"]
    return out


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ctxbench", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 300) -> None:
    t0 = time.time()
    while not ready():
        if proc.poll() is not None:
            pytest.fail("the process finished before it could be killed; make the job longer")
        if time.time() - t0 > timeout:
            proc.kill()
            pytest.fail("timed out waiting for the process to reach the kill point")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.process
def test_kill9_during_training_then_resume_matches(tmp_path):
    args = ["train", "method=lm", "model=tiny", "trainer.max_steps=40", "trainer.save_every=4",
            "trainer.progress=false", "method.lora.dropout=0.1", "method.seq_len=64"]
    full = tmp_path / "full"
    assert run_cli(*args, f"hydra.run.dir={full}").returncode == 0
    killed = tmp_path / "killed"
    proc = _start([*args, f"hydra.run.dir={killed}"])
    _kill_when(proc, lambda: (killed / "checkpoints" / "step_0000012").exists())
    assert not (killed / "train_summary.json").exists()
    r = run_cli(*args, "trainer.resume=auto", f"hydra.run.dir={killed}")
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = _losses(full), _losses(killed)
    assert sorted(b) == list(range(1, 41))
    for step in range(1, 41):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step


def _progress(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        row = con.execute("SELECT COALESCE(SUM(done), 0) FROM progress").fetchone()
        con.close()
        return int(row[0])
    except sqlite3.Error:
        return 0


def _changes(db: Path) -> list[tuple]:
    import sqlite3

    con = sqlite3.connect(str(db))
    rows = con.execute("SELECT * FROM records ORDER BY 1").fetchall()
    con.close()
    return rows


@pytest.mark.process
def test_kill9_during_memory_ingestion_then_rerun(tmp_path):
    """memorybank on the tiny model: kill mid-ingest, rerun; same store, same answers, no question twice."""
    args = ["eval", "memory=memorybank", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false", TINY_ANSWERS,
            "llm.context_window=512", "embedder=minilm", "progress=false", "memory.progress=false"]
    full = tmp_path / "full"
    r = run_cli(*args, f"hydra.run.dir={full}")
    assert r.returncode == 0, r.stderr[-3000:]
    killed = tmp_path / "killed"
    proc = _start([*args, f"hydra.run.dir={killed}"])
    _kill_when(proc, lambda: sum(_progress(db) for db in killed.glob("stores/*/memorybank.sqlite")) >= 3)
    assert not (killed / "results.json").exists()
    r = run_cli(*args, f"hydra.run.dir={killed}")
    assert r.returncode == 0, r.stderr[-3000:]
    a = [json.loads(x) for x in (full / "predictions.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (killed / "predictions.jsonl").read_text().splitlines()]
    assert [x["id"] for x in b] == [x["id"] for x in a]  # each question once
    assert [x["prediction"] for x in b] == [x["prediction"] for x in a]
    stores = sorted(p.relative_to(full) for p in full.glob("stores/*/memorybank.sqlite"))  # one per history
    assert stores and stores == sorted(p.relative_to(killed) for p in killed.glob("stores/*/memorybank.sqlite"))
    for rel in stores:
        assert len(_changes(killed / rel)) == len(_changes(full / rel))
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (full, killed))
    assert ra["overall"] == rb["overall"]


@pytest.mark.process
@pytest.mark.parametrize("kill_at", [2, 3])  # after a step's first new edge; after an invalidation + node writes
def test_kill9_inside_a_mem0g_step_then_rerun_gives_the_clean_graph(tmp_path, kill_at):
    """Mem0g's graph commits statement by statement, its records once per step: killed inside a step
    (some of its graph writes on disk), the rerun gives the graph, records and counts of a clean run."""
    helper = REPO / "tests" / "mem0g_kill.py"

    def ingest(workdir: Path, at: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(helper), str(workdir), str(at)], cwd=REPO, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})

    clean = ingest(tmp_path / "clean", 0)
    assert clean.returncode == 0, clean.stderr[-3000:]
    killed = ingest(tmp_path / "killed", kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    rerun = ingest(tmp_path / "killed", 0)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(rerun.stdout.splitlines()[-1]) == json.loads(clean.stdout.splitlines()[-1])
