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
                            "steps": 2, "rounds": 1, "timeout_s": 240, "reference": None})
    res = run(cfg, {"run_dir": tmp_path})
    assert res["tables"] == []  # reference: null = no reference row
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


def test_reference_row_reads_x_reference_through_the_in_run_ratio(tmp_path):
    """The reference row (tiny model, small ICAE): its step beside the HF LoRA LM step from one process,
    × reference = 1.47 × LM step ÷ its step, memory against 2,158 MB, the goal read at batch 1 only."""
    from ctxbench.bench.train_step import reference_rows

    ref = section_config("bench", "train_step", {})["reference"]
    ref = OmegaConf.merge(ref, {"model": "tiny", "batch_sizes": [1, 2], "lm_tokens": 64, "steps": 2,
                                "overrides": ["method.mem_size=4", "method.compression_rate=4",
                                              "method.context_tokens=16", "method.lm_tokens=0", "method.lambda_ae=1"]})
    rows = reference_rows(ref, 240, "text_sample", 1)
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    one, two = rows
    assert one["loss_tokens"] == 17 and two["loss_tokens"] == 34  # 16 context tokens + eos per example
    assert one["lm_tokens"] == 64 and two["lm_tokens"] == 128
    assert one["step_vs_lm"] == pytest.approx(one["step_s"] / one["lm_step_s"], rel=2e-2)
    assert one["x_reference"] == pytest.approx(1.47 / one["step_vs_lm"], rel=2e-2)
    assert one["peak_vs_reference"] == pytest.approx(one["peak_rss_mb"] / 2158.0, rel=1e-2)
    assert one["met"] == (one["x_reference"] >= 2.0 and one["peak_vs_reference"] <= 0.6)
    assert "met" not in two  # the reference's figures are batch-1 figures
