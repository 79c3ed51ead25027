"""Every trainable method, built on a fresh tiny model of a given dtype, with one training batch.

Shared by tests/test_precision.py and tests/test_grad_checkpointing.py. Dropout is off in every
case (the configs' LoRA dropout is 0, the tiny Llama has no attention dropout), and every LoRA B
starts nonzero so each trainable tensor gets a gradient on the first step.
"""
from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

CONF = Path(__file__).resolve().parents[1] / "ctxbench" / "conf" / "method"
TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun. " * 3

CASES = ["lm", "lm_full", "icae_pretrain", "icae_finetune", "ccm_concat", "ccm_merge", "lococo", "lococo_lora_embed"]


def method_cfg(conf: str, **over):
    return OmegaConf.merge(load_conf_file(CONF / f"{conf}.yaml"), over)


def tiny(dtype: torch.dtype, **over):
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    return load_model(option_config("model", {"name": "tiny", "dtype": name, **over}))


def ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(5, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _nonzero_lora(m) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def _batch(case: str, m):
    if case in ("lm", "lm_full"):
        return m.collate([ids(40), ids(33, 1)])
    if case.startswith("icae"):
        from ctxbench.methods import icae_data as D

        ctx = m.layout.encode(TEXT)[:100]
        if case == "icae_finetune":
            return m.collate([D.Example(context=ctx, prompt=ids(6, 2), answer=ids(5, 3)),
                              D.Example(context=ctx[:50], prompt=ids(4, 4), answer=ids(7, 5))])
        return m.collate([D.Example(context=ctx, continuation=ids(20, 2)), D.Example(context=ctx[:70])])
    if case.startswith("ccm"):
        return m.collate([m.layout([ids(6), ids(5, 1), ids(7, 2)], ids(4, 3)), m.layout([ids(8, 4), ids(6, 5)])])
    return m.collate([ids(64), ids(64, 1)])  # lococo: 4 segments of 16 over a 16-slot cache


def build_case(case: str, dtype: torch.dtype, **model_over):
    """(method, batch) for ``case`` on a fresh tiny model in ``dtype`` (peft and CCM edit it in place)."""
    bundle = tiny(dtype, **model_over)
    torch.manual_seed(0)
    if case == "lm":
        cfg = method_cfg("lm", seq_len=48)
    elif case == "lm_full":
        cfg = method_cfg("lm", seq_len=48, lora={"enabled": False})
    elif case.startswith("icae"):  # icae_finetune.yaml is icae_pretrain.yaml with name and mode
        cfg = method_cfg("icae_pretrain", name=case, mode=case.split("_")[1], mem_size=4, compression_rate=4,
                         lm_tokens=20)
    elif case.startswith("ccm"):
        cfg = method_cfg(case, n_tok=3)
    elif case == "lococo":
        cfg = method_cfg("lococo", segment_len=16, mem_size=16, n_segments=4, kernel_size=5, local_len=0)
    elif case == "lococo_lora_embed":  # LoRA + the base's own embeddings and norms trained too
        cfg = method_cfg("lococo", segment_len=16, mem_size=16, n_segments=4, kernel_size=5, local_len=0,
                         train_embed_norm=True, lora={"enabled": True, "target_modules": ["q_proj", "v_proj"]})
    else:
        raise KeyError(case)
    m = build("method", cfg, bundle=bundle)
    _nonzero_lora(m)
    return m, _batch(case, m)


def trainables(m) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in m.named_parameters() if p.requires_grad}
