"""The lean gated MLP (methods/lean_mlp.py): HF's forward values bit for bit, its gradients to rounding,
a third fewer MLP tensors kept for backward; installed on the base model of the training methods."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ctxbench.config.compose import option_config
from ctxbench.methods.lean_mlp import SiluMul, lean_mlp, plain_mlp
from ctxbench.models.loading import load_model


def test_silu_mul_equals_silu_times_up():
    torch.manual_seed(0)
    g0, u0 = torch.randn(7, 33) * 3, torch.randn(7, 33)
    w = torch.randn(7, 33)
    outs = []
    for fn in (lambda g, u: F.silu(g) * u, SiluMul.apply):
        g, u = g0.clone().requires_grad_(True), u0.clone().requires_grad_(True)
        y = fn(g, u)
        (y * w).sum().backward()
        outs.append((y.detach(), g.grad, u.grad))
    (y0, dg0, du0), (y1, dg1, du1) = outs
    assert torch.equal(y0, y1)
    assert torch.allclose(dg0, dg1, atol=1e-6) and torch.allclose(du0, du1, atol=1e-6)


def _saved_bytes(fn):
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, total[0]


def test_model_same_logits_and_gradients_fewer_saved_bytes():
    bundle = load_model(option_config("model", {"name": "tiny"}))
    model = bundle.model
    ids = torch.randint(0, 100, (2, 12))
    emb = model.get_input_embeddings()(ids).detach()

    def run():
        x = emb.clone().requires_grad_(True)
        out, saved = _saved_bytes(lambda: model(inputs_embeds=x).logits)
        out.float().pow(2).mean().backward()
        return out.detach(), x.grad, saved

    y0, g0, s0 = run()
    n = lean_mlp(model)
    assert n == model.config.num_hidden_layers and lean_mlp(model) == n  # idempotent
    y1, g1, s1 = run()
    assert torch.equal(y0, y1)
    assert torch.allclose(g0, g1, atol=1e-6, rtol=1e-5)
    inter = 2 * 12 * model.config.intermediate_size * 4  # one intermediate tensor per layer, float32
    assert s0 - s1 >= model.config.num_hidden_layers * inter
    with plain_mlp(model):
        assert _saved_bytes(lambda: model(inputs_embeds=emb.clone().requires_grad_(True)).logits)[1] == s0
    assert _saved_bytes(lambda: model(inputs_embeds=emb.clone().requires_grad_(True)).logits)[1] == s1


def test_training_methods_install_it():
    from tests.test_token_loss import _icae

    m = _icae("tiny")
    assert sum(getattr(x, "_lean_mlp", False) for x in m.modules()) == m.base.config.num_hidden_layers
