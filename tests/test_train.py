"""The one training loop: loss falls, checkpoints are complete, resume is exact, truncation is caught."""
from __future__ import annotations

import json

import pytest

from ctxbench import checkpoint as ck

BASE = ["train", "method=lm", "model=tiny", "trainer.progress=false", "trainer.save_every=5"]


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_lm_loss_falls_and_writes_run_folder(cli, tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "trainer.max_steps=20", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    m = [x for x in metrics(run) if "loss" in x]
    assert [x["step"] for x in m] == list(range(1, 21))
    assert m[-1]["loss"] < m[0]["loss"] - 0.1
    assert {"lr", "tokens_per_s", "grad_norm"} <= set(m[0])
    assert (run / ".hydra" / "config.yaml").exists()
    last = ck.list_checkpoints(run / "checkpoints")[-1]
    assert last.name == "step_0000020"
    ck.verify(last)
    assert (last / "trainable.safetensors").stat().st_size > 0


def test_resume_continues_exactly(cli, tmp_path):
    common = [*BASE, "trainer.max_steps=14", "method.lora.dropout=0.1", "trainer.grad_accum=2"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli(*common, f"hydra.run.dir={full}").returncode == 0
    r = cli(*common, "trainer.stop_after=8", f"hydra.run.dir={cut}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert max(x["step"] for x in metrics(cut)) == 8
    r = cli(*common, "trainer.resume=auto", f"hydra.run.dir={cut}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed from" in r.stdout + r.stderr
    a = {x["step"]: x["loss"] for x in metrics(full) if "loss" in x}
    b = {x["step"]: x["loss"] for x in metrics(cut) if "loss" in x}
    assert sorted(b) == list(range(1, 15))  # steps 9-10 written once, not twice
    for s in range(6, 15):
        assert b[s] == pytest.approx(a[s], abs=1e-6), s


def test_truncated_checkpoint_is_detected(tmp_path):
    import torch

    c = ck.save_checkpoint(tmp_path, 3, trainable={"w": torch.ones(100)}, method_config={"name": "x"})
    ck.verify(c)
    f = c / "trainable.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(ck.CheckpointError, match="truncated"):
        ck.load_weights(c)


def test_incomplete_checkpoint_is_ignored(tmp_path):
    import torch

    ck.save_checkpoint(tmp_path, 1, trainable={"w": torch.ones(3)}, method_config={})
    (tmp_path / "step_0000002.tmp").mkdir()  # a crash mid-write
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_0000001"]
