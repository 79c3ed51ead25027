"""The default ``train`` is a demo that shows learning and ends with where the results are and what to run next."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.core.registry import build
from ctxbench.training.message import done_message

CONF = Path(__file__).resolve().parents[1] / "conf"


def write_metrics(run: Path, rows: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9, "lo')  # torn


def test_done_message_names_losses_results_and_next_command(tmp_path):
    run = tmp_path / "my run"
    write_metrics(run, [{"step": 1, "loss": 4.1}, {"step": 10, "loss": 3.6, "eval_loss": 3.76},
                        {"step": 20, "loss": 3.1, "eval_loss": 3.67}, {"step": 20, "final": True, "eval_loss": 3.67}])
    msg = done_message(run, 20, 3.67, "lm", "step_0000020")
    assert msg.splitlines() == [
        "done: 20 steps, train loss 4.10 → 3.10, held-out loss 3.76 (step 10) → 3.67 (step 20)",
        f"results: {run}/ — metrics.jsonl, train_summary.json, checkpoints/step_0000020",
        f"next: python -m ctxbench eval method=lm checkpoint={shlex.quote(str(run))} dataset=locomo_sample limit=5"]
    assert "dataset=pwc_sample" in done_message(run, 20, 3.67, "icae", None)
    write_metrics(run, [{"step": i + 1, "loss": v} for i, v in enumerate([4.0, 3.7, 4.1, 4.3, 4.0, 3.3, 3.3, 3.8,
                                                                          3.7, 3.9, 3.6, 3.8, 3.6, 3.8, 4.1])])
    assert done_message(run, 15, None, "lm", None).startswith("done: 15 steps, train loss 4.02 → 3.78 (mean of 5 "
                                                              "steps), no held-out loss")
    write_metrics(run, [{"step": 1, "loss": 4.1}])
    assert "no held-out loss" in done_message(run, 1, None, "lm", None).splitlines()[0]


def test_default_dataset_is_the_shipped_public_domain_text():
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF), job_name="t"):
        cfg = compose("train")
    assert cfg.dataset.name == "shakespeare_sample" and cfg.model.name == "smollm2_135m"
    (sample,) = build("dataset", cfg.dataset)
    assert 50_000 < len(sample.history.text) <= 300_000  # enough to hold windows out, small enough to ship
    assert sample.history.text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")
    assert int(cfg.trainer.eval_every) > 0 and float(cfg.trainer.eval_fraction) > 0


def test_train_ends_with_a_next_command_that_runs(cli, tmp_path):
    run = tmp_path / "run"
    r = cli("train", "model=tiny", "trainer.max_steps=4", "trainer.eval_every=2", "trainer.progress=false",
            f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    out = (r.stdout + r.stderr).splitlines()
    done = next(i for i, line in enumerate(out) if line.startswith("done: 4 steps, train loss "))
    assert "held-out loss" in out[done] and "(step 2) →" in out[done] and out[done].endswith("(step 4)")
    assert out[done + 1] == f"results: {run}/ — metrics.jsonl, train_summary.json, checkpoints/step_0000004"
    nxt = out[done + 2]
    assert nxt == f"next: python -m ctxbench eval method=lm checkpoint={run} dataset=locomo_sample limit=5"
    argv = shlex.split(nxt.removeprefix("next: python -m ctxbench "))
    e = cli(*argv, "limit=1", "progress=false", f"hydra.run.dir={tmp_path / 'eval'}")
    assert e.returncode == 0, e.stderr[-2000:]
    assert (tmp_path / "eval" / "predictions.jsonl").exists()


@pytest.mark.slow  # the real default run: ~1 min on 2 free CPU cores
def test_default_train_held_out_loss_falls(cli, tmp_path):
    run = tmp_path / "demo"
    r = cli("train", "trainer.progress=false", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    held = [x["eval_loss"] for x in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "eval_loss" in x and not x.get("final")]
    assert len(held) == 3 and held[0] > held[1] > held[2] and held[0] - held[2] > 0.1
