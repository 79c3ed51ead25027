"""Gradient checkpointing for every trainable method: the same loss and gradients, and the layers
really are recomputed in backward (tiny model, fp32, dropout off).

ICAE's decoder runs with the LoRA adapter disabled; its recompute happens during backward, after
``disable_adapter()`` has exited, so before the fix it rebuilt the decoder with LoRA on and torch
raised ``CheckpointError`` (recomputed tensors differ from the forward's). LoCoCo runs segment by segment over
the cache, which transformers' per-layer checkpointing would drop: it checkpoints whole segments.
"""
from __future__ import annotations

import pytest
import torch
from method_cases import CASES, build_case, trainables


def decoder_layers(m):
    from ctxbench.methods.press_hooks import decoder_of

    return decoder_of(m.bundle.model).layers


def loss_and_grads(m, batch):
    """Loss, trainables' gradients, and how many layer MLPs ran in forward and again in backward."""
    calls = [0]
    hooks = [layer.mlp.register_forward_pre_hook(  # pre: a recompute stops early, at its last saved tensor
             lambda *_: calls.__setitem__(0, calls[0] + 1))
             for layer in decoder_layers(m)]
    try:
        m.train()
        out = m(batch)
        in_forward = calls[0]
        out.loss.backward()
    finally:
        for h in hooks:
            h.remove()
    grads = {n: p.grad.clone() for n, p in trainables(m).items() if p.grad is not None}
    return float(out.loss.detach()), grads, in_forward, calls[0] - in_forward


def assert_same(plain, ckpt):
    (l0, g0, f0, r0), (l1, g1, f1, r1) = plain, ckpt
    assert r0 == 0 and f1 == f0 and r1 > 0, (f0, r0, f1, r1)  # checkpointed layers ran again in backward
    assert l1 == pytest.approx(l0, rel=1e-6)
    assert g0 and g0.keys() == g1.keys()
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-7, msg=n)
    assert any(bool(g.any()) for g in g0.values())


@pytest.mark.parametrize("case", CASES)
def test_checkpointing_gives_the_same_loss_and_gradients(case):
    m, batch = build_case(case, torch.float32)
    plain = loss_and_grads(m, batch)
    m, batch = build_case(case, torch.float32)
    m.gradient_checkpointing_enable()  # what train.py calls for trainer.gradient_checkpointing=true
    assert_same(plain, loss_and_grads(m, batch))


@pytest.mark.parametrize("case", ["icae_pretrain", "icae_finetune"])
def test_icae_with_checkpointing_enabled_on_the_model(case):
    """The 7B model configs set ``model.gradient_checkpointing: true``: the model checkpoints from
    loading, before ICAE wraps it; and a caller may switch it on on the model after building."""
    m, batch = build_case(case, torch.float32)
    plain = loss_and_grads(m, batch)
    m, batch = build_case(case, torch.float32, gradient_checkpointing=True)
    assert_same(plain, loss_and_grads(m, batch))
    m, batch = build_case(case, torch.float32)
    m.bundle.model.activation_checkpointing_enable()
    assert_same(plain, loss_and_grads(m, batch))


def test_icae_checkpointing_under_bf16_autocast_over_a_bf16_base():
    """The 7B path as a whole: bf16 base, fp32 trainables, autocast, checkpointing."""
    runs = []
    for ckpt in (False, True):
        m, batch = build_case("icae_pretrain", torch.bfloat16)
        if ckpt:
            m.gradient_checkpointing_enable()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs.append(loss_and_grads(m, batch))
    (l0, g0, _, _), (l1, g1, _, r1) = runs
    assert r1 > 0 and l1 == l0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-3, atol=1e-6, msg=n)


def test_train_runs_icae_with_checkpointing_on_a_bf16_base(cli, tmp_path):
    """``train`` with trainer.gradient_checkpointing=true, bf16 model and bf16 autocast: it trains,
    and the exported trainable weights are fp32."""
    from safetensors.torch import load_file

    from ctxbench.training import checkpoint as ck

    run = tmp_path / "run"
    r = cli("train", "method=icae_pretrain", "model=tiny", "model.dtype=bfloat16", "trainer.precision=bf16",
            "trainer.gradient_checkpointing=true", "trainer.max_steps=2", "trainer.batch_size=2",
            "trainer.progress=false", "method.max_examples=4", "trainer.eval_fraction=0", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    last = ck.list_checkpoints(run / "checkpoints")[-1]
    state = load_file(str(last / "trainable.safetensors"))
    assert state and {v.dtype for v in state.values()} == {torch.float32}
    assert "memory_embed" in state
