"""The one training loop: loss falls, checkpoints are complete, resume is exact, truncation is caught."""
from __future__ import annotations

import json
import time

import pytest

from ctxbench.training import checkpoint as ck

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


def old_factor(name: str, step: int, warmup: int, total: int) -> float:
    """The hand-written schedule train.py had before transformers.get_scheduler (the reference)."""
    import math

    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return {"cosine": 0.5 * (1.0 + math.cos(math.pi * progress)), "linear": 1.0 - progress, "constant": 1.0}[name]


def lrs(name: str, warmup: int, total: int, lr: float = 1e-3) -> list[float]:
    """The lr of optimizer step 0..total-1 (and of the step after the last) under train.make_scheduler."""
    import torch

    from ctxbench.training.optim import make_scheduler

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)
    sched = make_scheduler(name, opt, warmup, total)
    out = []
    for _ in range(total + 1):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("name", ["cosine", "linear", "constant"])
@pytest.mark.parametrize("warmup,total", [(0, 20), (0, 1), (1, 40), (3, 17), (10, 10)])
def test_get_scheduler_matches_the_old_schedule_past_the_warmup(name, warmup, total):
    new = lrs(name, warmup, total)
    past = range(warmup, total + 1 if warmup < total else total)  # (warmup == total: no step past it)
    for step in past:  # identical once warmed up (and everywhere without a warmup)
        assert new[step] == pytest.approx(1e-3 * old_factor(name, step, warmup, total), abs=1e-12), step
    for step in range(warmup):  # transformers' warmup starts at 0: one step behind the old (step+1)/warmup
        assert new[step] == pytest.approx(1e-3 * step / warmup, abs=1e-12)
        assert new[step] == pytest.approx(1e-3 * (old_factor(name, step - 1, warmup, total) if step else 0.0))


def test_scheduler_state_survives_a_checkpoint(tmp_path):
    import torch

    from ctxbench.training.optim import make_scheduler

    def fresh():
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
        return opt, make_scheduler("cosine", opt, 3, 12)

    opt, sched = fresh()
    for _ in range(5):
        opt.step()
        sched.step()
    c = ck.save_checkpoint(tmp_path, 5, trainable={"w": torch.ones(2)}, method_config={}, optimizer=opt,
                           scheduler=sched, state={"micro": 5, "rng": {}})
    opt2, sched2 = fresh()
    ck.load_training_state(c, opt2, sched2)
    assert sched2.last_epoch == 5 and sched2.get_last_lr() == sched.get_last_lr()
    opt.step(), sched.step(), opt2.step(), sched2.step()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] != 1e-3


def test_unknown_scheduler_is_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"trainer.scheduler='warmup_stable': use cosine, linear, constant"):
        lrs("warmup_stable", 0, 5)


KEY = "sk-test-DoNotLeak-0123456789abcdef"


def logger_cfg(name: str):
    from omegaconf import OmegaConf

    from ctxbench.config.compose import option_config

    return OmegaConf.create({"logger": {"name": name, "project": "ctxbench-test", "entity": None, "mode": "offline",
                                        "tags": ["plumbing"]},
                             "trainer": {"grad_accum": 1, "precision": "fp32"},
                             "launcher": option_config("launcher", {"name": "single", "cpu": True}),
                             "llm": {"api_key": KEY}})


@pytest.fixture
def accelerator_state():
    """Accelerators made in this process; the singleton state is reset afterwards."""
    from accelerate.state import AcceleratorState

    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def offline_runs(run):
    return sorted((run / "wandb").glob("offline-run-*"))


def test_wandb_is_the_accelerator_tracker_and_resumes_its_run(tmp_path, monkeypatch, accelerator_state):
    pytest.importorskip("wandb")
    from ctxbench.training.accelerator import make_accelerator
    from ctxbench.training.metrics_log import MetricsLog

    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = logger_cfg("wandb")
    for resume_step, step in ((0, 1), (1, 2)):  # a run, then its resume: one wandb run id for both
        acc = make_accelerator(cfg, project_dir=tmp_path)
        assert [str(t) for t in acc.log_with] == ["wandb"]
        log = MetricsLog(tmp_path, cfg, enabled=True, resume_step=resume_step, say=lambda _m: None, acc=acc)
        log.write({"step": step, "loss": 2.0 / step, f"probe_metric_{step}": 1.0})
        acc.end_training()
    run_id = (tmp_path / "wandb_id").read_text()
    runs = offline_runs(tmp_path)
    assert len(runs) == 2 and all(run_id in r.name for r in runs)  # wandb adds "-1" to a folder made in the same second
    for _ in range(120):  # wandb's service process may still be flushing on a loaded machine
        data = [next(r.glob("run-*.wandb")).read_bytes() for r in runs]
        if b"probe_metric_1" in data[0] and b"probe_metric_2" in data[1]:
            break
        time.sleep(0.25)
    assert b"probe_metric_1" in data[0] and b"probe_metric_2" in data[1]
    assert b"ctxbench-test" in data[0] and b"plumbing" in data[0]  # project and tags reached wandb.init
    assert all(KEY.encode() not in d for d in data) and b"***" in data[0]  # the config sent was redacted


def test_logger_none_or_wandb_disabled_starts_no_run(tmp_path, monkeypatch, accelerator_state):
    from ctxbench.training.accelerator import make_accelerator
    from ctxbench.training.metrics_log import MetricsLog

    (tmp_path / "none").mkdir(), (tmp_path / "off").mkdir()
    acc = make_accelerator(logger_cfg("none"), project_dir=tmp_path / "none")
    assert acc.log_with == []
    MetricsLog(tmp_path / "none", logger_cfg("none"), True, 0, acc=acc).write({"step": 1, "loss": 1.0})
    acc.end_training()
    assert not (tmp_path / "none" / "wandb_id").exists() and not (tmp_path / "none" / "wandb").exists()

    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "disabled")  # wins over logger.mode=offline
    acc = make_accelerator(logger_cfg("wandb"), project_dir=tmp_path / "off")
    MetricsLog(tmp_path / "off", logger_cfg("wandb"), True, 0, acc=acc).write({"step": 1, "loss": 1.0})
    acc.end_training()
    assert not offline_runs(tmp_path / "off")
