"""StreamingLLM's key drift in bf16: how far the keys a press keeps with ``positions=cache`` are
from the plain model's keys at the same slots after many segments, and the attention-logit error
that leaves (docs/compression-methods.md, StreamingLLM).

``rotation="fp32"`` measures the runner as it is (each compression rotates the keys back to
position 0 and to their new slot in fp32 with fp32 cos/sin, rounding once); ``rotation="bf16"``
measures the rotation it replaced (back and forth in the cache dtype with cos/sin in that dtype,
a rounding and a slightly non-orthogonal rotation at every compression), kept here so the fix stays
measurable. tests/test_press_exact.py and ``bench suite=gpu`` (part ``drift``) call
:func:`rotation_drift`.
"""
from __future__ import annotations

from typing import Any

import torch

ROTATIONS = ("fp32", "bf16")


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 250, (1, n), generator=g)


def plain_keys_and_queries(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's keys (from the plain model's own cache) and rotated queries for ``ids`` at positions
    0..n−1: each key rotated once, by the model."""
    from transformers import DynamicCache

    from ctxbench.methods.press_hooks import rotate
    from ctxbench.models.loading import cache_kwarg

    attn = model.model.layers[0].self_attn
    seen: dict[str, torch.Tensor] = {}
    hook = attn.register_forward_hook(lambda m, a, kw, out: seen.update(h=kw["hidden_states"],
                                                                         pe=kw["position_embeddings"]),
                                      with_kwargs=True)
    try:
        cache = DynamicCache()
        model(input_ids=ids, use_cache=True, **{cache_kwarg(model): cache})
    finally:
        hook.remove()
    b, n = ids.shape
    q = attn.q_proj(seen["h"]).view(b, n, -1, attn.head_dim).transpose(1, 2)
    cos, sin = seen["pe"]
    return cache.layers[0].keys, rotate(q, cos, sin)


def runner_class(rotation: str) -> type:
    """The PressRunner class for ``rotation``: the runner itself (fp32), or one re-rotating as before the fix (bf16)."""
    from ctxbench.methods.kv_cache import PressRunner
    from ctxbench.methods.press_hooks import rotate

    if rotation not in ROTATIONS:
        raise ValueError(f"rotation={rotation!r}: use one of {', '.join(ROTATIONS)}")
    if rotation == "fp32":
        return PressRunner

    class CacheDtypeRotation(PressRunner):
        """Before the fix: keys rotated back to position 0 and to their new slots in the cache dtype,
        with the model's cos/sin cast to that dtype (``PressRunner.rerotate`` until commit 376dcef)."""

        def _rerotate(self, k: torch.Tensor, inverse: bool) -> torch.Tensor:
            cos, sin = self.rope(k, torch.arange(k.shape[-2], device=k.device).view(1, -1))
            return rotate(k, cos.to(k.dtype), (-sin if inverse else sin).to(k.dtype))

        def unrotate(self, k: torch.Tensor) -> torch.Tensor:
            return self._rerotate(k, inverse=True)

        def to_slots(self, k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            return self._rerotate(k.to(dtype), inverse=False)

    return CacheDtypeRotation


@torch.no_grad()
def rotation_drift(segments: int = 400, segment_len: int = 4, mem_size: int = 16, n_sink: int = 4,
                   head_dim: int = 128, dtype: torch.dtype = torch.bfloat16, rotation: str = "fp32",
                   device: str | torch.device = "cpu") -> dict[str, float]:
    """StreamingLLM (positions=cache) over ``segments`` segments of a one-layer tiny Llama with one
    head of ``head_dim``: each kept key vs the plain model's key for the same token at the same slot
    (relative error of the vector; sinks are slots 1..n_sink−1, slot 0 is never rotated) and the
    largest attention-logit error the kept tokens' own queries see."""
    from ctxbench.config.compose import option_config
    from ctxbench.methods.kv_baselines import SinkPress
    from ctxbench.methods.kv_cache import KVState
    from ctxbench.models.loading import load_model

    bundle = load_model(option_config("model", {"name": "tiny", "num_layers": 1, "hidden_size": head_dim,
                                                "num_heads": 1, "num_kv_heads": 1, "device": "cpu",
                                                "dtype": str(dtype).split(".")[-1]}))
    model = bundle.model.to(device)
    ids = ids_of(segments * segment_len, seed=3).to(device)
    runner = runner_class(rotation)(model, mem_size, SinkPress(n_sink), positions="cache")
    state = runner.stream(KVState(), ids, segment_len)
    n = ids.shape[1]
    kept = list(range(n_sink)) + list(range(n - (mem_size - n_sink), n))
    if state.layers[0].pos[0, 0].tolist() != kept:
        raise RuntimeError(f"StreamingLLM kept positions {state.layers[0].pos[0, 0].tolist()}, expected {kept}")
    ref_k, q = plain_keys_and_queries(model, ids[:, kept])
    got = state.layers[0].k
    rel = ((got.float() - ref_k.float()).norm(dim=-1) / ref_k.float().norm(dim=-1))[0, 0]
    scale = model.model.layers[0].self_attn.scaling
    logits_err = (q.float() @ (got.float() - ref_k.float()).transpose(-1, -2)).abs().max() * scale
    logits = (q.float() @ ref_k.float().transpose(-1, -2)).abs().max() * scale
    sinks = rel[1:n_sink]
    return {"sink_median": float(sinks.median()), "sink_max": float(sinks.max()),
            "window_max": float(rel[n_sink:].max()), "logit_err_max": float(logits_err),
            "logit_abs_max": float(logits)}
