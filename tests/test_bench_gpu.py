"""``bench suite=gpu``: bf16 training steps of the real methods on the 7B shapes at random init.

This machine has no GPU: ``gpu.size=tiny`` runs the same code (registry-built methods, their own
training examples, autocast bf16 steps, token counting, MFU arithmetic) on small models of both
families on CPU, and the 7B shapes are checked on the meta device (no memory, no download).
"""
from __future__ import annotations

import json
import math

import pytest
from omegaconf import OmegaConf
from ctxbench.config.compose import command_config, section_config

# small examples so the CPU run is short; the 7B defaults are in conf/bench.yaml
SMALL = ["gpu.size=tiny", "gpu.parts=[train]", "gpu.warmup_steps=1", "gpu.steps=2",
         "gpu.methods.lm.overrides=['method.seq_len=256']",
         "gpu.methods.icae.overrides=['method.mem_size=32','method.context_tokens=128','method.lm_tokens=128']",
         "gpu.methods.ccm.overrides=['method.step_tokens=64','method.train_steps=2']",
         "gpu.methods.lococo.overrides=['method.segment_len=64','method.mem_size=64','method.n_segments=2']"]


def run_tiny(cli, tmp_path, models: list[str]) -> tuple[dict, dict, str]:
    out = tmp_path / "bench"
    p = cli("bench", "suite=gpu", *SMALL, f"gpu.models=[{','.join(models)}]", f"hydra.run.dir={out}", timeout=600,
            env={"OMP_NUM_THREADS": "2"})
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "bench.json").read_text())["suites"]["gpu"]
    assert res["status"] == "ok", res
    assert res["params"]["size"] == "tiny" and res["params"]["device"] == "cpu"
    rows = {(r["model"], r["attention"], r["method"]): r for r in res["rows"]}
    assert set(rows) == {(m, a, k) for m in models for a in ("sdpa", "flash_attention_2")
                         for k in ("lm", "icae", "ccm", "lococo")}
    check_rows(res, rows)
    return res, rows, (out / "bench.md").read_text()


def check_rows(res: dict, rows: dict) -> None:
    peak = res["params"]["peak_flops"]
    assert peak == 989e12
    for (model, attn, method), r in rows.items():
        if attn == "flash_attention_2":  # FlashAttention-2 is CUDA-only: a reason, not a failure
            assert r["status"] == "skipped" and "CUDA" in r["reason"]
            continue
        assert r["status"] == "ok", r
        assert r["finite_loss"] and r["trainable_params"] > 0 and r["method_config"]
        assert r["tokens_per_step"] >= r["loss_tokens_per_step"] > 0
        # step_s is rounded to 4 decimals: tokens_per_s lies between the bounds that rounding leaves
        assert r["tokens_per_step"] / (r["step_s"] + 5e-5) * 0.999 <= r["tokens_per_s"] <= r["tokens_per_step"] / max(r["step_s"] - 5e-5, 1e-9) * 1.001
        assert math.isclose(r["mfu"], 6 * r["flops_params"] * r["tokens_per_s"] / peak, rel_tol=1e-3)
        assert r["peak_mem_gb"] is None and r["peak_rss_mb"] > 50  # CPU: resident memory instead
    for model in {m for m, _, _ in rows}:
        # each method's own example length: LoRA-LM 256 tokens; ICAE encodes 128 + 32 slots and decodes 32 +
        # [AE] + 128; CCM 2 steps of 64 tokens + 8 <COMP> each; LoCoCo 2 segments of 64
        sizes = {k: rows[(model, "sdpa", k)]["tokens_per_step"] for k in ("lm", "icae", "ccm", "lococo")}
        assert sizes["lm"] == 256 and sizes["lococo"] == 128 and sizes["ccm"] == 2 * (64 + 8)
        assert sizes["icae"] >= 128 + 32 + 32 + 128


def test_gpu_suite_on_cpu_tiny_writes_throughput_mfu_and_memory(cli, tmp_path):
    """Every method on the Mistral family (GQA); test_gradient_checkpointing... runs the Llama family."""
    _, _, md = run_tiny(cli, tmp_path, ["mistral_7b"])
    assert "| model | attention | method |" in md and "MFU" in md


@pytest.mark.slow  # ~50 s on 2 busy cores: both families, every method
def test_gpu_suite_on_cpu_tiny_both_families(cli, tmp_path):
    run_tiny(cli, tmp_path, ["llama2_7b", "mistral_7b"])


def test_the_7b_shapes_are_the_published_models():
    """Llama-2-7B has 6,738,415,616 parameters and Mistral-7B 7,241,732,096 (their model cards)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ctxbench.bench.gpu import flops_params, model_config

    for name, total in (("llama2_7b", 6_738_415_616), ("mistral_7b", 7_241_732_096)):
        conf = model_config(name, "7b", "sdpa")
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16)
        assert sum(p.numel() for p in model.parameters()) == total
        assert flops_params(model) == total - 32000 * 4096  # less the input embeddings
    assert model_config("mistral_7b", "7b", "sdpa").num_key_value_heads == 8
    assert model_config("mistral_7b", "tiny", "sdpa").num_key_value_heads == 2  # tiny keeps GQA


def test_gradient_checkpointing_does_not_count_recomputed_tokens():
    """The token count is of the forward: recomputation in the backward is not counted again."""
    import torch

    from ctxbench.bench.gpu import measure

    base = {"size": "tiny", "warmup_steps": 1, "steps": 1, "dataset": "text_sample", "batch_size": 1,
            "methods": {"lm": {"method": "lm", "overrides": ["method.seq_len=128"]}}}
    rows = [measure(section_config("bench", "gpu", {**base, "gradient_checkpointing": gc}), "llama2_7b", "lm", "sdpa",
                    torch.device("cpu")) for gc in (False, True)]
    assert [r["gradient_checkpointing"] for r in rows] == [False, True]
    assert rows[0]["tokens_per_step"] == rows[1]["tokens_per_step"] == 128


def test_7b_without_a_gpu_is_a_skip_with_the_way_out():
    import torch

    from ctxbench.bench.common import Skip
    from ctxbench.bench.gpu import device_of

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(Skip, match="gpu.size=tiny runs the same steps on CPU"):
        device_of(section_config("bench", "gpu", {"size": "7b", "device": "auto"}))


def test_gpu_is_not_part_of_all():
    from ctxbench.bench import selected

    assert "gpu" not in selected(command_config("bench", {"suite": "all"}))
    assert selected(command_config("bench", {"suite": "gpu"})) == ["gpu"]
