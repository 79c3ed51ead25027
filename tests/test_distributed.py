"""2-process CPU runs through `accelerate launch` (gloo): DDP, DeepSpeed ZeRO-2 / ZeRO-3 and FSDP
match the 1-process run, and each stops, resumes from its checkpoint and still matches it.

1 process × batch 4 and 2 processes × batch 2 see the same examples at every step (the data order
is a function of the seed; rank r takes its slice), so the loss trajectories must agree, and so
must the final trainable weights. Each launcher trains 3 steps and stops (``trainer.stop_after=3``,
a checkpoint at step 3), then ``trainer.resume=auto`` trains steps 4-6 from it: past a newer
checkpoint whose rank-1 state file is damaged, which it must name and skip. The sharded launchers
save every rank's state through accelerate (``checkpoints/step_N/accelerate/``, in the MANIFEST);
DDP keeps optimizer.pt (its state is replicated). FSDP runs through tests/cpu_fsdp.py, which opens
accelerate's FSDP path on CPU (accelerate gates it to GPUs; see that file).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import TINY_ANSWERS

pytestmark = pytest.mark.distributed

COMMON = ["method=lm", "model=tiny", "trainer.max_steps=6", "trainer.progress=false", "trainer.save_every=3",
          "trainer.eval_fraction=0", "trainer.max_grad_norm=0.5"]  # 0.5: clipping acts on steps 1-4
HERE = Path(__file__).resolve().parent
DS_ENV = {"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0"}
# launcher: (environment, what the run prints as its distributed type, the rank-1 state file to damage)
LAUNCHERS = {
    "ddp": ({"ACCELERATE_USE_CPU": "1"}, "MULTI_CPU x2", "optimizer.pt"),
    "deepspeed_zero2": (DS_ENV, "DEEPSPEED x2", "accelerate/pytorch_model/zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    "deepspeed_zero3": (DS_ENV, "DEEPSPEED x2", "accelerate/pytorch_model/zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    "fsdp": ({"ACCELERATE_USE_CPU": "1"}, "FSDP x2", "accelerate/optimizer_0/__1_0.distcp"),
}


def losses(run):
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


def final_weights(run):
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / "step_0000006" / "trainable.safetensors"))


def max_diff(a, b):
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def launch(run, launcher, extra_env, *overrides):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra_env}
    if launcher.startswith("deepspeed"):
        env.pop("ACCELERATE_USE_CPU", None)  # accelerate turns DeepSpeed off when it is set
    entry = [str(HERE / "cpu_fsdp.py")] if launcher == "fsdp" else ["-m", "ctxbench"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           *entry, "train", *COMMON, f"launcher={launcher}", "trainer.batch_size=2",
           f"hydra.run.dir={run}", *overrides]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    from conftest import run_cli

    run = tmp_path_factory.mktemp("single")
    r = run_cli("train", *COMMON, "trainer.batch_size=4", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    return run


def damaged_newer_copy(ckpt, damage):
    """step_0000005: a copy of ``ckpt`` claiming step 5, its MANIFEST rewritten, then one file damaged."""
    from ctxbench.training import checkpoint as ck

    newer = ckpt.parent / "step_0000005"
    shutil.copytree(ckpt, newer)
    state = json.loads((newer / "state.json").read_text())
    (newer / "state.json").write_text(json.dumps({**state, "step": 5}))
    ck.write_manifest(newer)
    f = newer / damage
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    return newer


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_two_processes_match_one_and_resume(tmp_path, single, launcher):
    from test_export import from_checkpoint

    env, kind, damage = LAUNCHERS[launcher]
    run = tmp_path / launcher
    out = launch(run, launcher, env, "trainer.stop_after=3")
    assert kind in out
    assert len(losses(run)) == 3
    step3 = run / "checkpoints" / "step_0000003"
    manifest = json.loads((step3 / "MANIFEST.json").read_text())
    assert set(json.loads((step3 / "state.json").read_text())["rng"]) == {"0", "1"}
    if launcher == "ddp":  # replicated state: rank 0's optimizer.pt is every rank's
        assert "optimizer.pt" in manifest and not (step3 / "accelerate").exists()
    else:  # every rank's shards, all covered by the MANIFEST
        assert "optimizer.pt" not in manifest
        assert damage in manifest and damage.replace("1", "0", 1) in manifest
        assert any(n.startswith("accelerate/random_states_1") for n in manifest)
    damaged_newer_copy(step3, damage)

    out = launch(run, launcher, env, "trainer.resume=auto")
    assert f"step_0000005: file {damage} is corrupt (sha256 mismatch); resuming from step_0000003" in out
    assert f"resumed from {step3} at step 3" in out
    ref = losses(single)
    assert len(losses(run)) == 6
    assert losses(run) == pytest.approx(ref, rel=1e-3)
    assert losses(run)[3:] == pytest.approx(ref[3:], rel=1e-5)  # the resumed steps, tighter
    assert max_diff(final_weights(run), final_weights(single)) < 1e-5
    if launcher != "ddp":  # the gathered export loads as eval / checkpoint=DIR load it
        method = from_checkpoint(run)
        assert max_diff(method.trainable_state_dict(), final_weights(single)) < 1e-5
    if launcher == "ddp":
        assert not list(tmp_path.glob("**/dist-*"))  # the pinned run dir was used by both ranks


ICAE = ["method=icae_pretrain", "method.mem_size=4", "method.compression_rate=4", "method.context_tokens=32",
        "method.lm_tokens=16", "model=tiny", "trainer.max_steps=2", "trainer.save_every=2", "trainer.progress=false",
        "trainer.eval_fraction=0"]


def test_zero3_icae_matches_one(tmp_path):
    """A method with parameters of its own (ICAE's memory embeddings) under ZeRO-3: built on a base
    model loaded partitioned, re-gathered in the backward, and exported whole."""
    from conftest import run_cli

    one = tmp_path / "one"
    r = run_cli("train", *ICAE, "trainer.batch_size=4", f"hydra.run.dir={one}")
    assert r.returncode == 0, r.stderr[-3000:]
    two = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1", **DS_ENV}
    env.pop("ACCELERATE_USE_CPU", None)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           "-m", "ctxbench", "train", *ICAE, "launcher=deepspeed_zero3", "trainer.batch_size=2", f"hydra.run.dir={two}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "DEEPSPEED x2" in r.stdout + r.stderr
    assert losses(two) == pytest.approx(losses(one), rel=1e-3)
    from safetensors.torch import load_file

    a, b = (load_file(str(d / "checkpoints" / "step_0000002" / "trainable.safetensors")) for d in (one, two))
    assert a["memory_embed"].shape == b["memory_embed"].shape and b["memory_embed"].numel() > 0
    assert max_diff(a, b) < 1e-5


EVAL = ["eval", "memory=full_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false", TINY_ANSWERS,
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
    assert ra["provenance"]["placement"]["processes"] == 1 and rb["provenance"]["placement"]["processes"] == 2
