"""Train resume edge cases through the CLI: a finished run, max_steps=0, a torn metrics.jsonl, a damaged checkpoint."""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.training import checkpoint as ck
from ctxbench.data.errors import DataError

BASE = ["train", "method=lm", "model=tiny", "trainer.progress=false", "method.seq_len=32", "trainer.max_steps=6",
        "trainer.save_every=2"]


def records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def loss_steps(run):
    return [x["step"] for x in records(run) if "loss" in x]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 6-step run (checkpoints at 4 and 6)."""
    from conftest import run_cli

    run = tmp_path_factory.mktemp("finished") / "run"
    r = run_cli(*BASE, f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    return run


def _snapshot(run):
    files = [run / "metrics.jsonl", run / "train_summary.json", *sorted((run / "checkpoints").rglob("*"))]
    return {str(f): (f.read_bytes() if f.is_file() else None, f.stat().st_mtime_ns) for f in files}


def test_resume_of_a_finished_run_says_so_and_rewrites_nothing(cli, finished):
    before = _snapshot(finished)
    r = cli(*BASE, "trainer.resume=auto", f"hydra.run.dir={finished}")
    assert r.returncode == 0, r.stderr[-2000:]
    said = [ln for ln in (r.stdout + r.stderr).splitlines() if "already complete" in ln]
    assert len(said) == 1 and "step 6" in said[0], r.stdout + r.stderr
    assert _snapshot(finished) == before


def test_a_fresh_start_into_a_trained_folder_is_refused_and_rewrites_nothing(cli, finished):
    """trainer.resume unset on a folder holding a run: trained from step 0 over its metrics.jsonl before."""
    before = _snapshot(finished)
    r = cli(*BASE, f"hydra.run.dir={finished}")
    assert r.returncode == 2, r.stdout[-1000:] + r.stderr[-2000:]
    err = r.stderr.strip().splitlines()[-1]
    assert str(finished) in err and "step_0000006" in err and "trainer.resume=auto" in err, r.stderr[-2000:]
    assert _snapshot(finished) == before


def test_resume_past_max_steps_is_one_line(cli, finished, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished, run)  # force_resume records the new config: keep the shared fixture as it is
    r = cli(*BASE, "trainer.max_steps=4", "trainer.resume=auto", f"hydra.run.dir={run}")
    assert r.returncode == 2 and "trainer.max_steps 6 → 4" in r.stderr  # the run folder is bound to its config
    r = cli(*BASE, "trainer.max_steps=4", "trainer.resume=auto", "force_resume=true", f"hydra.run.dir={run}")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert "step 6" in err and "trainer.max_steps=4" in err and "step_0000006" in err, r.stderr[-2000:]


def test_crash_after_the_final_checkpoint_finishes_without_retraining(cli, finished, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "train_summary.json").unlink()  # killed between the final checkpoint and the summary
    kept = [x for x in records(run) if not x.get("final")]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
    manifest = run / "checkpoints" / "step_0000006" / "MANIFEST.json"
    mtime = manifest.stat().st_mtime_ns
    r = cli(*BASE, "trainer.resume=auto", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["step"] == 6 and summary["loss"] == kept[-1]["loss"]
    assert loss_steps(run) == list(range(1, 7)) and sum(1 for x in records(run) if x.get("final")) == 1
    assert manifest.stat().st_mtime_ns == mtime  # the final checkpoint was not written again


def test_a_finished_run_with_a_damaged_final_checkpoint_is_redone_from_the_intact_one(cli, finished, tmp_path):
    """It was reported 'already complete' with weights that no longer load; now steps 5-6 are trained again."""
    import shutil

    from safetensors.torch import load_file

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    final = run / "checkpoints" / "step_0000006" / ck.WEIGHTS
    good = {k: v.clone() for k, v in load_file(str(final)).items()}  # load_file maps the file: copy first
    final.write_bytes(b"\0" * final.stat().st_size)
    r = cli(*BASE, "trainer.resume=auto", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "already complete" not in out and "final checkpoint is damaged" in out
    assert "resuming from step_0000004" in out
    again = load_file(str(final))
    assert all(torch.equal(good[k], again[k]) for k in good)  # resume is exact: the same final weights


def test_a_damaged_wandb_id_is_one_line(tmp_path):
    from ctxbench.core.errors import ConfigError
    from ctxbench.training.metrics_log import wandb_run_id

    first = wandb_run_id(tmp_path)
    assert wandb_run_id(tmp_path) == first and len(first) == 12
    (tmp_path / "wandb_id").write_bytes(b"\xff\x00 garbage")
    with pytest.raises(ConfigError, match=r"wandb_id is damaged .* delete it"):
        wandb_run_id(tmp_path)


def test_max_steps_zero_trains_nothing_and_finishes(cli, tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "trainer.max_steps=0", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert loss_steps(run) == []
    [final] = records(run)
    assert final["final"] and final["step"] == 0 and final["eval_loss"] > 0
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["step"] == 0 and summary["loss"] is None
    ck.verify(ck.list_checkpoints(run / "checkpoints")[-1])


def test_torn_last_metrics_line_is_tolerated_on_resume(cli, tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "trainer.stop_after=4", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 4.2, "l')  # killed mid-write
    r = cli(*BASE, "trainer.resume=auto", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "torn last line" in r.stdout + r.stderr
    assert loss_steps(run) == list(range(1, 7))


def _log(run_dir, lines: list[str], resume_step: int):
    from ctxbench.training.metrics_log import MetricsLog

    (run_dir / "metrics.jsonl").write_text("".join(ln + "\n" for ln in lines))
    cfg = OmegaConf.create({"logger": {"name": "none"}})
    return MetricsLog(run_dir, cfg, enabled=True, resume_step=resume_step, say=lambda _m: None)


def test_malformed_metrics_line_before_the_last_names_file_and_line(tmp_path):
    lines = ['{"step": 1, "loss": 2.0}', '{"step": 2, "lo', '{"step": 3, "loss": 1.0}']
    with pytest.raises(DataError, match=r"metrics\.jsonl, record line 2: malformed JSON"):
        _log(tmp_path, lines, resume_step=3)
    with pytest.raises(DataError, match=r"metrics\.jsonl, record line 1: expected a JSON object"):
        _log(tmp_path, ["[1, 2]", '{"step": 1}'], resume_step=3)


def test_metrics_log_keeps_lines_up_to_the_checkpoint(tmp_path):
    lines = ['{"step": 1, "loss": 2.0}', '{"step": 2, "loss": 1.5}', '{"step": 3, "loss": 1.0}', '{"st']
    log = _log(tmp_path, lines, resume_step=2)
    assert log.last_loss == 1.5
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.parametrize("arg", ["checkpoint", "trainer.resume"])
def test_missing_checkpoint_is_named_before_the_model_loads(cli, tmp_path, arg):
    cache = tmp_path / "cache"
    r = cli(*BASE, f"{arg}={tmp_path / 'nope'}", f"hydra.run.dir={tmp_path / 'run'}", env={"CTXBENCH_CACHE": str(cache)})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == f"ctxbench: error: checkpoint '{tmp_path / 'nope'}' does not exist"
    assert not (cache / "models").exists()


def test_an_explicit_resume_is_verified_before_the_model_loads(cli, finished, tmp_path):
    """trainer.resume=DIR without its MANIFEST is refused before anything in it is read (a sharded
    checkpoint's DeepSpeed / FSDP files are unpickled on load: they must be verified first)."""
    import shutil

    ckpt = tmp_path / "step_0000004"
    shutil.copytree(finished / "checkpoints" / "step_0000004", ckpt)
    (ckpt / ck.MANIFEST).unlink()
    cache = tmp_path / "cache"
    r = cli(*BASE, f"trainer.resume={ckpt}", f"hydra.run.dir={tmp_path / 'run'}", env={"CTXBENCH_CACHE": str(cache)})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (f"ctxbench: error: checkpoint {ckpt} has no {ck.MANIFEST}: "
                                                 "it was not written completely")
    assert not (cache / "models").exists()  # refused before the model was built


ICAE = ["train", "method=icae", "model=tiny", "dataset=text_sample", "trainer.progress=false", "method.mem_size=4",
        "method.compression_rate=4", "method.context_tokens=32", "method.lm_tokens=16",
        "method.objective_sampling=true", "method.lm_ratio=0.5", "method.lora.dropout=0.1", "trainer.batch_size=1",
        "trainer.max_steps=6", "trainer.save_every=3", "trainer.eval_every=2"]


def drawn(run):
    """Per step: the loss and which objectives the step drew (its ae_loss / lm_loss, present when drawn)."""
    return {x["step"]: (x["loss"], x.get("ae_loss"), x.get("lm_loss")) for x in records(run) if "loss" in x}


def test_icae_sampled_objectives_resume_exactly(cli, tmp_path):
    """icae_paper_pretrain's objective sampling: stopped at step 3 and resumed, the run draws the
    objectives an uninterrupted one draws at steps 4-6 (the draws' position is in the checkpoint)
    and ends with the same weights."""
    from safetensors.torch import load_file

    full, cut = tmp_path / "full", tmp_path / "cut"
    r = cli(*ICAE, f"hydra.run.dir={full}")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli(*ICAE, "trainer.stop_after=3", f"hydra.run.dir={cut}")
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((cut / "checkpoints" / "step_0000003" / ck.STATE_JSON).read_text())
    assert set(state["rng"]["0"]["method"]) == {"objective"}
    r = cli(*ICAE, "trainer.resume=auto", f"hydra.run.dir={cut}")
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = drawn(full), drawn(cut)
    assert sorted(b) == list(range(1, 7))
    assert len({(x[1] is None, x[2] is None) for x in a.values()}) > 1  # the draws differ from step to step
    for s in range(1, 7):
        assert b[s] == pytest.approx(a[s], abs=1e-6), s
    wa, wb = (load_file(str(run / "checkpoints" / "step_0000006" / ck.WEIGHTS)) for run in (full, cut))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)

