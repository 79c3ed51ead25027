"""``model=tiny`` is the same model whether or not the cache already holds it: same seed, same losses."""
from __future__ import annotations

import json

import torch
from ctxbench.config.compose import option_config

ARGS = ["train", "method=lm", "model=tiny", "trainer.progress=false", "trainer.max_steps=3", "method.seq_len=32",
        "trainer.save_every=0"]


def losses(run):
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


def test_first_run_on_an_empty_cache_matches_later_runs(cli, tmp_path):
    env = {"CTXBENCH_CACHE": str(tmp_path / "fresh_cache")}
    cold, warm = tmp_path / "cold", tmp_path / "warm"
    r = cli(*ARGS, f"hydra.run.dir={cold}", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "fresh_cache" / "models").glob("tiny-*"))  # this run built the model
    r = cli(*ARGS, f"hydra.run.dir={warm}", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(losses(cold)) == 3 and losses(cold) == losses(warm)


def test_building_the_tiny_model_leaves_the_global_rng_alone(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from ctxbench.models.loading import tiny_dir

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_dir(option_config("model", {"name": "tiny", "hidden_size": 32, "seed": 5}))
    assert torch.equal(torch.rand(3), expected)
