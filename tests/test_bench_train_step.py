"""`suite=train_step` smoke: lm and one other method each measured in their own subprocess on the tiny
model (tokens/s, ratios to lm, RSS memory); a training-free method is recorded as skipped."""
from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf
from ctxbench.config.compose import command_config, section_config


def test_train_step_smoke_lm_and_one_method(tmp_path):
    """lm + ccm_concat measured in subprocesses on the tiny model; h2o is skipped as training-free."""
    from ctxbench.bench.train_step import run

    cfg = section_config("bench", "train_step", {"model": "tiny", "methods": ["ccm_concat", "h2o"], "baseline": "lm",
                            "dataset": "text_sample", "datasets": {}, "batch_size": 2, "warmup_steps": 1,
                            "steps": 2, "rounds": 1, "timeout_s": 240})
    res = run(cfg, {"run_dir": tmp_path})
    rows = {r["method"]: r for r in res["rows"]}
    assert list(rows) == ["lm", "ccm_concat", "h2o"]
    lm, ccm = rows["lm"], rows["ccm_concat"]
    assert lm["status"] == "ok" and ccm["status"] == "ok", res["rows"]
    assert lm["tokens_per_s_vs_lm"] == 1.0 and lm["step_s_vs_lm"] == 1.0
    assert lm["loss_tokens"] == 2 * 255  # two 256-token windows, next-token loss
    for r in (lm, ccm):
        assert r["tokens_per_s"] > 0 and math.isclose(r["tokens_per_s"], r["loss_tokens"] / r["step_s"], rel_tol=1e-2)
        assert r["trainable_params"] > 0 and r["peak_rss_mb"] > r["setup_rss_mb"] > 50
        assert r["first_step_peak_extra_mb"] >= 0
    assert ccm["tokens_per_s_vs_lm"] == pytest.approx(ccm["tokens_per_s"] / lm["tokens_per_s"], rel=1e-2)
    assert rows["h2o"]["status"] == "skipped" and "training-free" in rows["h2o"]["reason"]
