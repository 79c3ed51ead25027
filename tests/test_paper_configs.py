"""Paper-scale experiments are one command each: their trainer settings are composed in (no weights load).

``train experiment=<cell> scale/<group>=paper`` must give the paper's model, launcher and trainer
values (each sourced in the scale file), pass the config checks, and still let the command line win.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.config.schema import check_types

CONF = Path(__file__).resolve().parents[1] / "conf"

# (experiment, scale override) → model label, launcher, method values, trainer values
PAPER = {
    ("icae_pwc_pretrain", "scale/icae_pretrain=paper"): (
        "mistral_7b", "deepspeed_zero2", {"name": "icae_pretrain", "mode": "pretrain", "mem_size": 128, "lora.r": 128},
        {"max_steps": 200000, "batch_size": 1, "grad_accum": 32, "lr": 1e-4, "scheduler": "linear",
         "warmup_steps": 300, "max_grad_norm": 2.0, "weight_decay": 0.0}),
    ("icae_pwc_finetune", "scale/icae_finetune=paper"): (
        "mistral_7b", "deepspeed_zero2", {"name": "icae_finetune", "mode": "finetune", "mem_size": 128},
        {"max_steps": 30000, "batch_size": 1, "grad_accum": 32, "lr": 5e-5, "scheduler": "linear",
         "warmup_steps": 300, "max_grad_norm": 2.0}),
    ("ccm_locomo_concat", "scale/ccm=paper"): (
        "llama2_7b_chat", "single", {"name": "ccm_concat", "n_tok": 8, "lora.r": 8},
        {"max_steps": 1000, "batch_size": 1, "grad_accum": 128, "lr": 3e-4, "scheduler": "cosine",
         "warmup_ratio": 0.03, "warmup_steps": None, "weight_decay": 0.0}),
    ("ccm_locomo_merge", "scale/ccm=paper"): (
        "llama2_7b_chat", "single", {"name": "ccm_merge", "n_tok": 8},
        {"max_steps": 1000, "grad_accum": 128, "lr": 3e-4, "scheduler": "cosine", "warmup_ratio": 0.03}),
    ("lococo_pile_lococo", "scale/lococo=paper"): (  # 4K → 32K context extension, 512-slot cache
        "llama2_7b", "single",
        {"name": "lococo", "segment_len": 512, "n_segments": 64, "mem_size": 512, "rope_scaling_factor": "auto",
         "lora.enabled": True, "lora.r": 8, "memory_lr_scale": 1000},
        {"max_steps": 1000, "batch_size": 1, "grad_accum": 2, "lr": 5e-5, "scheduler": "linear",
         "warmup_steps": 0, "max_grad_norm": 0.0}),
    ("lococo_pile_lococo", "scale/lococo=paper_4k"): (
        "llama2_7b", "single", {"segment_len": 512, "n_segments": 8, "mem_size": 512, "lora.enabled": False},
        {"max_steps": 1000, "batch_size": 1, "grad_accum": 16, "lr": 5e-5, "scheduler": "linear"}),
}


def composed(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="train", overrides=list(overrides))
    check_types(cfg, "train")  # types, ranges and choices of every value
    return cfg


def pick(node, dotted: str):
    for part in dotted.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize("experiment,scale", list(PAPER), ids=[f"{e}-{s.split('=')[1]}" for e, s in PAPER])
def test_paper_experiment_composes_its_trainer_settings(experiment, scale):
    label, launcher, method, trainer = PAPER[(experiment, scale)]
    cfg = composed(f"experiment={experiment}", scale)
    assert cfg.experiment.scale == "paper" and cfg.model.label == label and cfg.launcher.name == launcher
    for key, want in method.items():
        assert pick(cfg.method, key) == want, f"method.{key}"
    for key, want in trainer.items():
        assert cfg.trainer[key] == want, f"trainer.{key}: {cfg.trainer[key]!r} != {want!r}"
    # every 7B paper run: bf16 weights and autocast, gradient checkpointing on
    assert cfg.trainer.precision == "bf16" and cfg.model.dtype == "bfloat16"
    assert cfg.trainer.gradient_checkpointing is True and cfg.model.gradient_checkpointing is True


def test_lococo_paper_examples_are_32k_tokens_with_rope_x8():
    cfg = composed("experiment=lococo_pile_lococo", "scale/lococo=paper")
    assert cfg.method.segment_len * cfg.method.n_segments == 32768
    # the factor the real method computes from a 4096-token window (Llama-2's): the tiny model has one
    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build

    tiny = composed("experiment=lococo_pile_lococo", "scale/lococo=paper", "model=tiny")
    assert tiny.model.max_position_embeddings == 4096
    method = build("method", tiny.method, bundle=load_model(tiny.model))
    assert method.rope_factor() == 8.0
    assert any("lora_" in n for n, p in method.named_parameters() if p.requires_grad)  # LoRA on for the extension


def test_the_command_line_still_wins_over_a_paper_scale():
    cfg = composed("experiment=icae_pwc_pretrain", "scale/icae_pretrain=paper", "trainer.max_steps=5",
                   "trainer.grad_accum=256", "launcher=single")
    assert (cfg.trainer.max_steps, cfg.trainer.grad_accum, cfg.launcher.name) == (5, 256, "single")
    assert cfg.trainer.lr == 1e-4  # the rest of the paper's setting stays


def test_cpu_scale_keeps_the_demo_trainer():
    """The CPU cells are unchanged: train.yaml's trainer defaults, SmolLM2."""
    cfg = composed("experiment=icae_pwc_pretrain")
    assert cfg.model.name == "smollm2_135m" and cfg.trainer.max_steps == 15 and cfg.trainer.precision == "fp32"
