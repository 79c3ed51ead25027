"""2-process CPU runs through `accelerate launch`: DDP and DeepSpeed ZeRO-2 match the 1-process run.

1 process × batch 4 and 2 processes × batch 2 see the same examples at every step (the data order
is a function of the seed; rank r takes its slice), so the loss trajectories must agree.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.distributed

COMMON = ["method=lm", "model=tiny", "trainer.max_steps=6", "trainer.progress=false", "trainer.save_every=0",
          "trainer.eval_fraction=0"]


def losses(run):
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


def launch(run, launcher, extra_env, *overrides):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra_env}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           "-m", "ctxbench", "train", *COMMON, f"launcher={launcher}", "trainer.batch_size=2",
           f"hydra.run.dir={run}", *overrides]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return r


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    from conftest import run_cli

    run = tmp_path_factory.mktemp("single")
    r = run_cli("train", *COMMON, "trainer.batch_size=4", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    return losses(run)


def test_ddp_two_processes_match_one(tmp_path, single):
    run = tmp_path / "ddp"
    r = launch(run, "ddp", {"ACCELERATE_USE_CPU": "1"})
    assert "MULTI_CPU x2" in r.stdout + r.stderr
    assert len(losses(run)) == 6
    assert losses(run) == pytest.approx(single, rel=1e-3)
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".")).count("metrics.jsonl") == 1
    assert not list(tmp_path.glob("**/dist-*"))  # the pinned run dir was used by both ranks


def test_deepspeed_zero2_two_processes_match_one(tmp_path, single):
    run = tmp_path / "ds"
    env = {"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0"}
    os.environ.pop("ACCELERATE_USE_CPU", None)  # accelerate turns DeepSpeed off when it is set
    r = launch(run, "deepspeed_zero2", env)
    assert "DEEPSPEED x2" in r.stdout + r.stderr
    assert losses(run) == pytest.approx(single, rel=1e-3)
    assert (run / "checkpoints").is_dir()


EVAL = ["eval", "memory=full_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false",
        "llm.context_window=384", "memory.max_new_tokens=6", "progress=false"]


def test_two_process_eval_matches_one(tmp_path):
    from conftest import run_cli

    one = tmp_path / "one"
    r = run_cli(*EVAL, f"hydra.run.dir={one}")
    assert r.returncode == 0, r.stderr[-3000:]
    two = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           "-m", "ctxbench", *EVAL, f"hydra.run.dir={two}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    a = [json.loads(x) for x in (one / "predictions.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (two / "predictions.jsonl").read_text().splitlines()]
    assert [x["id"] for x in a] == [x["id"] for x in b]
    assert [x["prediction"] for x in a] == [x["prediction"] for x in b]
    assert not list(two.glob("predictions.rank*.jsonl"))
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (one, two))
    assert ra["overall"]["f1"] == rb["overall"]["f1"]
