"""The models of ``bench suite=gpu``: the published 7B shapes built at random init on the device, and
where the check runs (``gpu.device``, ``gpu.size``).

No weights can be downloaded where the check runs, so each model is ``AutoModelForCausalLM.from_config``
on the published shapes of Llama-2-7B and Mistral-7B (:data:`SHAPES`), built directly on the device
in bf16; ``gpu.size=tiny`` keeps the families (GQA for Mistral) at a size a CPU runs in seconds.
The byte-level tiny tokenizer (made in code, with a chat template; ids < 300) is valid in every
vocabulary here, so nothing but the code travels.
"""
from __future__ import annotations

import gc
import importlib.util
from typing import Any

from ctxbench.bench.common import Skip

# Published shapes (config.json of each hub model; meta-llama/Llama-2-7b-hf and mistralai/Mistral-7B-v0.1),
# keyed by the conf/model name whose dtype / attention / gradient checkpointing the cell uses.
SHAPES: dict[str, dict[str, Any]] = {
    "llama2_7b": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "mistral_7b": {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                   "sliding_window": 4096},
}
# gpu.size=tiny: the same families (GQA for Mistral), small enough for a CPU
TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 4096}
TINY_KV_HEADS = {"llama": 4, "mistral": 2}
H200_BF16_DENSE = 989e12  # NVIDIA H200 SXM datasheet: 989 TFLOPS BF16 Tensor Core, dense (1,979 with sparsity)


def model_config(name: str, size: str, attn: str) -> Any:
    """The transformers config of model ``name`` at ``size`` (7b: its published shapes; tiny: small)."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise Skip(f"no published shapes for model {name!r} (gpu.models takes {', '.join(SHAPES)})")
    shape = dict(SHAPES[name])
    if size == "tiny":
        shape.update(TINY, num_key_value_heads=TINY_KV_HEADS[shape["model_type"]])
        shape.pop("sliding_window", None)
    model_type = shape.pop("model_type")
    return AutoConfig.for_model(model_type, attn_implementation=attn, use_cache=False, tie_word_embeddings=False,
                                bos_token_id=1, eos_token_id=2, pad_token_id=0, **shape)


def build_bundle(name: str, size: str, attn: str, device: Any, grad_ckpt: bool, seed: int) -> Any:
    """A random-initialised bf16 model of ``name`` on ``device``, with the byte-level tiny tokenizer.

    The tokenizer's ids (< 300) are valid in every vocabulary here; no method resizes embeddings
    (their added tokens are their own parameters), so the model keeps its published shapes.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from ctxbench.models.loading import ModelBundle, tiny_tokenizer

    conf = model_config(name, size, attn)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise on the device: a 7B random init on the CPU takes minutes
        model = AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16, attn_implementation=attn)
    if grad_ckpt:
        model.gradient_checkpointing_enable()
    return ModelBundle(model=model, tokenizer=tiny_tokenizer(), name=f"{name}-random", path=f"random:{name}")


def flops_params(model: Any) -> int:
    """N of 6·N: the base model's parameters less the input embedding table."""
    emb = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters()) - emb.numel()


def flash_available() -> str | None:
    """Why FlashAttention-2 cannot run here, or None when ``flash_attn`` imports."""
    if importlib.util.find_spec("flash_attn") is None:
        return "flash_attn is not installed (pip install flash-attn)"
    try:
        import flash_attn  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken build is a reason, not a crash
        return f"flash_attn does not import: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return None


def device_of(cfg: Any) -> Any:
    import torch

    want = cfg.device
    size = cfg.size
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want.startswith("cuda") and not torch.cuda.is_available():
        raise Skip(f"gpu.device={want}: no CUDA device here")
    if size != "tiny" and not want.startswith("cuda"):
        raise Skip("gpu.size=7b needs a CUDA device (7B models at random on a CPU take many minutes per step); "
                   "gpu.size=tiny runs the same steps on CPU")
    return torch.device(want)




def free(device: Any) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
