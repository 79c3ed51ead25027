"""CCM's conditional LoRA: an adapter on a Linear layer that fires only at ``<COMP>`` positions.

The gate is a per-token boolean mask ``[batch, seq]`` held by a shared :class:`CompGate`, set by the
method for the current forward. Where the gate is off the output is the base layer's output,
bit for bit (``torch.where``, not ``base + 0 * delta``), so every non-COMP token computes exactly
what the frozen base model computes — the property CCM relies on (paper §3.2, reference
``LinearMask`` in ``src/arch/ccm_llama.py`` + ``src/peft_custom/lora.py``).

The adapter's A and B are float32 whatever the base dtype (fp32 master weights, as peft's LoRA):
the delta is computed from the input cast to float32 (under autocast the matmuls still run in
bf16) and the gated sum is cast back to the base layer's output dtype.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch import nn

from ctxbench.config.compose import option_config
from ctxbench.core.errors import ConfigError


class CompGate:
    """The per-token mask of the current forward (``None``: no COMP tokens, adapters off)."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None

    def set(self, mask: torch.Tensor | None) -> None:
        self.mask = None if mask is None or not bool(mask.any()) else mask.bool()


class GatedLoRALinear(nn.Module):
    """``base(x) + (B A x) * alpha / r`` where ``gate`` is on, ``base(x)`` elsewhere."""

    def __init__(self, base: nn.Linear, gate: CompGate, r: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        if r <= 0:
            raise ConfigError(f"method.lora.r must be positive, got {r}")
        self.base = base
        self.gate = gate
        self.r = int(r)
        self.scaling = float(alpha) / float(r)
        dev = base.weight.device
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=torch.float32, device=dev))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=torch.float32, device=dev))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as peft: B = 0, so the adapter starts as identity
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    @property
    def weight(self) -> torch.Tensor:  # some HF code reads .weight (dtype / device checks)
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        mask = self.gate.mask
        if mask is None:
            return out
        if mask.shape != x.shape[:-1]:
            raise RuntimeError(f"COMP gate shape {tuple(mask.shape)} does not match tokens {tuple(x.shape[:-1])}")
        delta = (self.dropout(x.to(self.lora_A.dtype)) @ self.lora_A.t()) @ self.lora_B.t()
        return torch.where(mask.unsqueeze(-1), (out + delta * self.scaling).to(out.dtype), out)


def install_gated_lora(model: nn.Module, gate: CompGate, targets: Iterable[str], r: int, alpha: float,
                       dropout: float = 0.0) -> list[GatedLoRALinear]:
    """Replace every Linear whose attribute name is in ``targets`` (e.g. q_proj, k_proj, v_proj,
    o_proj) with a :class:`GatedLoRALinear` sharing ``gate``. Returns the wrappers."""
    targets = set(targets)
    found: list[tuple[nn.Module, str, nn.Linear]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if name in targets and isinstance(child, nn.Linear):
                found.append((parent, name, child))
    if not found:
        raise ConfigError(f"method.lora.target_modules={sorted(targets)} matched no Linear layer of the model")
    wrappers = []
    for parent, name, child in found:
        w = GatedLoRALinear(child, gate, r, alpha, dropout)
        setattr(parent, name, w)
        wrappers.append(w)
    return wrappers


def lora_config(cfg: Any) -> dict[str, Any]:
    """r / alpha / dropout / target_modules from ``method.lora`` (null: the schema's, the reference defaults)."""
    lc = cfg.lora if cfg.lora is not None else option_config("method", {"name": cfg.name}).lora
    return {"r": lc.r, "alpha": float(lc.alpha), "dropout": float(lc.dropout), "targets": list(lc.target_modules)}
