"""The gated MLP of Llama-family models, keeping two of its three intermediate tensors for backward.

HF's ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` keeps, per layer and token, the gate, the up
projection and the activated gate (``intermediate_size`` floats each: for SmolLM2 on an ICAE step,
about 170 MB of the 280 MB of activations autograd holds). :class:`SiluMul` computes
``silu(gate) * up`` as one autograd function that keeps only ``gate`` and ``up`` and recomputes the
activation in backward: the same forward values bit for bit (``F.silu(gate) * up``), gradients to
float rounding, a third less MLP memory (tests/test_lean_mlp.py).

:func:`lean_mlp` swaps it into every module shaped like that (``gate_proj`` / ``up_proj`` /
``down_proj`` / an ``act_fn`` that is SiLU); other MLPs are left as they are. Each training method
calls it on its base model when it is built (``methods.base.TrainableMethod``).
"""
from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

import torch
import torch.nn.functional as F


class SiluMul(torch.autograd.Function):
    """``silu(gate) * up``, saving only the inputs."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        d_gate = d_up = None
        if ctx.needs_input_grad[1]:
            d_up = grad * gate * sig
        if ctx.needs_input_grad[0]:
            d_gate = grad * up * sig * (1.0 + gate * (1.0 - sig))
        return d_gate, d_up


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return SiluMul.apply(gate, up)
    return F.silu(gate) * up


def _forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))


def _is_silu(act: Any) -> bool:
    if isinstance(act, torch.nn.SiLU):
        return True
    return type(act).__name__ in ("SiLUActivation", "SiLU") and not list(act.parameters())


def lean_mlp(model: torch.nn.Module) -> int:
    """Swap :class:`SiluMul` into ``model``'s gated SiLU MLPs; returns how many (idempotent)."""
    n = 0
    for m in model.modules():
        if getattr(m, "_lean_mlp", False):
            n += 1
            continue
        if all(hasattr(m, k) for k in ("gate_proj", "up_proj", "down_proj", "act_fn")) and _is_silu(m.act_fn):
            m.forward = types.MethodType(_forward, m)
            m._lean_mlp = True
            n += 1
    return n


@contextlib.contextmanager
def plain_mlp(model: torch.nn.Module) -> Iterator[None]:
    """HF's own MLP forward for the block (the bench's plain-HF yardstick step)."""
    swapped = [m for m in model.modules() if getattr(m, "_lean_mlp", False)]
    for m in swapped:
        del m.forward
    try:
        yield
    finally:
        for m in swapped:
            m.forward = types.MethodType(_forward, m)
