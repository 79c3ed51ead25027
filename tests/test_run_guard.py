"""Run folders: bound to the config they were made with, and to one process at a time."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.runs import guard as run_guard
from ctxbench.runs.guard import EXCLUDED_KEYS, RunFolderError, claim, fingerprint

from tests.conftest import REPO

BASE = {"seed": 0, "limit": 5, "progress": True, "force_resume": False, "metrics": ["f1"],
        "memory": {"name": "rag", "k": 10, "chunk_size": 2, "progress": True},
        "llm": {"name": "openai", "model": "gpt", "api_key": "sk-secretsecretsecret", "api_key_env": "OPENAI_API_KEY",
                "cache": True},
        "trainer": {"max_steps": 20, "resume": None, "stop_after": None, "num_workers": 0, "progress": True},
        "logger": {"name": "none"}}


def cfg(**overrides) -> object:
    c = OmegaConf.create(BASE)
    for key, value in overrides.items():
        OmegaConf.update(c, key.replace("__", "."), value, force_add=True)
    return c


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    yield path
    run_guard.release_lock(path)


def run_json(run: Path) -> dict:
    return json.loads((run / ".ctxbench" / "run.json").read_text())


def test_first_use_records_the_config_and_its_fingerprint_without_secrets(run):
    claim(run, cfg())
    rec = run_json(run)
    assert rec["config"]["memory"] == {"name": "rag", "k": 10, "chunk_size": 2}  # memory.progress excluded
    assert rec["config"]["llm"]["api_key"] == "***" and "sk-secret" not in json.dumps(rec)
    assert rec["config"]["llm"]["api_key_env"] == "OPENAI_API_KEY"
    for key in ("progress", "limit", "force_resume", "logger", "metrics"):
        assert key not in rec["config"]
    assert set(rec["config"]["trainer"]) == {"max_steps"}
    assert rec["fingerprint"] == fingerprint(rec["config"]) and len(rec["fingerprint"]) == 64
    assert rec["excluded_keys"] == list(EXCLUDED_KEYS)


def test_resume_with_keys_that_cannot_change_results_is_accepted(run):
    claim(run, cfg())
    claim(run, cfg(limit=50, progress=False, memory__progress=False, trainer__resume="auto", trainer__stop_after=8,
                   trainer__num_workers=4, trainer__progress=False, logger__name="wandb", llm__cache=False,
                   llm__api_key="sk-anotheranotheranother", metrics=["f1", "bleu1"]))
    assert run_json(run)["config"]["memory"]["k"] == 10


def test_resume_with_another_config_is_refused_naming_the_keys(run):
    claim(run, cfg())
    with pytest.raises(RunFolderError) as e:
        claim(run, cfg(memory__k=1))
    assert str(e.value) == (f"{run} was run with a different config: memory.k 10 → 1 "
                            "(use a new hydra.run.dir, or pass force_resume=true to reuse it)")
    both = r"llm\.model gpt → other, memory\.k 10 → 1, memory\.rerank <unset> → true"
    with pytest.raises(RunFolderError, match=both):
        claim(run, cfg(memory__k=1, llm__model="other", memory__rerank=True))
    assert run_json(run)["config"]["memory"]["k"] == 10  # nothing recorded by a refused run


def test_force_resume_accepts_and_records_the_new_config(run):
    claim(run, cfg())
    first = run_json(run)["fingerprint"]
    claim(run, cfg(memory__k=1, force_resume=True))
    rec = run_json(run)
    assert rec["config"]["memory"]["k"] == 1 and rec["previous_fingerprints"] == [first]
    assert run_guard.forced(run) and run_guard.forced(run / "rag.sqlite")
    claim(run, cfg(memory__k=1))  # the new config is now the folder's
    with pytest.raises(RunFolderError, match="memory.k 1 → 10"):
        claim(run, cfg())


def test_unreadable_run_record_is_a_one_line_error(run):
    (run / ".ctxbench").mkdir()
    (run / ".ctxbench" / "run.json").write_text("[1, 2]")
    with pytest.raises(RunFolderError, match=r"run\.json: not a run record"):
        claim(run, cfg())


# ---- the lock, with real processes ---------------------------------------------------------------

HOLD = ("import sys, time; from ctxbench.runs.guard import acquire_lock; acquire_lock(sys.argv[1]); "
        "print('held', flush=True); time.sleep(120)")


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process that locks ``run`` and keeps it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_process_is_refused_and_a_killed_holder_does_not_block(run):
    holder = hold_lock(run)
    try:
        with pytest.raises(RunFolderError) as e:
            claim(run, cfg())
        assert str(e.value) == (f"{run} is in use by another ctxbench process (pid {holder.pid}); "
                                "wait for it or use another hydra.run.dir")
        assert not (run / ".ctxbench" / "run.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (run / ".ctxbench" / "lock").read_text().strip() == str(holder.pid)  # the stale file stays ...
    claim(run, cfg())  # ... and does not block: the kernel dropped the dead process's lock
    assert (run / ".ctxbench" / "lock").read_text().strip() == str(os.getpid())


def test_lock_is_held_for_the_process_lifetime_and_released_on_exit(run):
    claim(run, cfg())
    probe = subprocess.run([sys.executable, "-c", HOLD, str(run)], cwd=REPO, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert probe.returncode == 1 and f"in use by another ctxbench process (pid {os.getpid()})" in probe.stderr
    run_guard.release_lock(run)
    holder = hold_lock(run)  # free again once released
    holder.send_signal(signal.SIGKILL)
    holder.wait()


def test_other_ranks_are_not_refused_by_rank_0s_lock(run, monkeypatch):
    holder = hold_lock(run)  # rank 0 of the launch
    try:
        (run / ".ctxbench" / "run.json").unlink(missing_ok=True)
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", "1")
        claim(run, cfg())  # rank 1: no lock taken, nothing written
        assert not (run / ".ctxbench" / "run.json").exists()
        run_guard.check_config(run, cfg(), write=True)  # what rank 0 records
        claim(run, cfg())
        with pytest.raises(RunFolderError, match="memory.k 10 → 1"):  # the config is still checked
            claim(run, cfg(memory__k=1))
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(RunFolderError, match="in use"):
            claim(run, cfg())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 10
    while time.time() < deadline:  # rank 0 gone: the folder is free
        try:
            claim(run, cfg())
            break
        except RunFolderError:
            time.sleep(0.1)
    assert (run / ".ctxbench" / "lock").read_text().strip() == str(os.getpid())


def test_a_long_difference_stays_one_short_line(run):
    claim(run, cfg())
    changed = {f"memory__x{i}": "v\nwith a newline " * 10 for i in range(9)}
    with pytest.raises(RunFolderError) as e:
        claim(run, cfg(**changed))
    msg = str(e.value)
    assert "\n" not in msg and msg.count("<unset> →") == 6 and "and 3 more" in msg and len(msg) < 700
