"""The shared next-token loss (methods/token_loss.py) equals logits + cross-entropy, in value and in
gradients; ICAE's and lm's training losses are the same as before it (the full-logits computation
written out here), on the tiny model and on one step of the packaged SmolLM2."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ctxbench.config.compose import option_config
from ctxbench.core.registry import build
from ctxbench.methods import icae_data as D
from ctxbench.methods.token_loss import token_loss
from ctxbench.models.loading import load_model

TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank, twice a day.",
         "A lazy dog sleeps in the sun while the cat watches birds from the window sill!!"]


def _reference(hidden, head, targets, weights=None):
    tok = F.cross_entropy(head(hidden).float(), targets, reduction="none")
    return tok.mean() if weights is None else (tok * weights).sum()


@pytest.mark.parametrize("with_bias,train_head,weighted,chunk", [
    (False, False, False, 3), (True, True, True, 4), (False, True, False, 100), (True, False, True, 1)])
def test_equals_cross_entropy_in_value_and_gradients(with_bias, train_head, weighted, chunk):
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=with_bias)
    head.weight.requires_grad_(train_head)
    if with_bias:
        head.bias.requires_grad_(train_head)
    h0 = torch.randn(11, 16)
    t = torch.randint(0, 50, (11,))
    w = torch.rand(11) if weighted else None
    grads = []
    for fused in (False, True):
        h = h0.clone().requires_grad_(True)
        head.zero_grad()
        loss = token_loss(h, head, t, w, chunk=chunk)[0] if fused else _reference(h, head, t, w)
        (3.0 * loss).backward()  # the incoming gradient is not always 1
        grads.append((loss.detach(), h.grad.clone(),
                      None if head.weight.grad is None else head.weight.grad.clone(),
                      None if not with_bias or head.bias.grad is None else head.bias.grad.clone()))
    (l0, gh0, gw0, gb0), (l1, gh1, gw1, gb1) = grads
    assert torch.allclose(l0, l1, atol=1e-6)
    assert torch.allclose(gh0, gh1, atol=1e-6)
    assert (gw0 is None) == (not train_head) and (gw1 is None) == (not train_head)
    if train_head:
        assert torch.allclose(gw0, gw1, atol=1e-6)
        if with_bias:
            assert torch.allclose(gb0, gb1, atol=1e-6)


def test_per_row_losses_and_no_grad():
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 30, bias=False)
    h, t = torch.randn(5, 8, requires_grad=True), torch.randint(0, 30, (5,))
    loss, tok = token_loss(h, head, t, chunk=2)
    assert not tok.requires_grad
    assert torch.allclose(tok, F.cross_entropy(head(h), t, reduction="none").detach(), atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(token_loss(h, head, t)[0], loss.detach(), atol=1e-6)


def _grads(method):
    return {n: p.grad.clone() for n, p in method.named_parameters() if p.requires_grad and p.grad is not None}


def _icae_full_logits_loss(m, batch):
    """ICAE's loss as it was computed before token_loss: full logits of the labelled rows, CE, λ parts."""
    slots = m.encode_segments(batch["enc_ids"], batch["enc_len"])
    owner = batch["enc_owner"]
    rows = torch.cat([slots[owner == o].reshape(-1, slots.shape[-1]) for o in batch["dec_owner"].tolist()])
    hidden = m.decode_hidden(m.decoder_embeds(batch["dec_ids"], rows), batch["dec_mask"])
    target = batch["dec_labels"][:, 1:]
    sel = target != -100
    tok = F.cross_entropy(m.base.get_output_embeddings()(hidden[:, :-1][sel]).float(), target[sel], reduction="none")
    kind = batch["dec_kind"].unsqueeze(1).expand_as(target)[sel]
    if m.mode == "finetune" or m.cfg.objective_sampling:
        return tok.mean()
    parts = {name: tok[kind == k].mean() for name, k in D.KIND.items() if bool((kind == k).any())}
    zero = tok.sum() * 0.0
    return m.lambda_ae * parts.get("ae", zero) + (1.0 - m.lambda_ae) * parts.get("lm", zero)


def _same_loss_and_grads(m, batch, old_loss_fn, atol, grad_rel=None):
    """Loss to ``atol`` (relative above 1); gradients elementwise to ``atol``, or, through a deep fp32
    model, to ``grad_rel`` in norm (rounding there is amplified layer by layer: on SmolLM2 the old
    full-logits path itself is 2.6e-5 off a float64 run in norm, the new one 4.8e-5; at the head the
    new path is the closer of the two to float64)."""
    m.train()
    m.zero_grad()
    old = old_loss_fn(m, batch)
    old.backward()
    g_old = _grads(m)
    m.zero_grad()
    new = m(batch).loss
    new.backward()
    old, new = old.detach(), new.detach()
    g_new = _grads(m)
    assert abs(float(old) - float(new)) <= atol * max(1.0, abs(float(old)))
    assert g_old.keys() == g_new.keys() and g_old
    for k in g_old:
        if grad_rel is None:
            assert torch.allclose(g_old[k], g_new[k], atol=atol, rtol=1e-4), k
        else:
            assert float((g_old[k] - g_new[k]).norm()) <= grad_rel * float(g_old[k].norm()), k


def _icae(model_name, **over):
    from tests.test_icae import method_cfg

    bundle = load_model(option_config("model", {"name": model_name}))
    torch.manual_seed(0)
    return build("method", method_cfg(name="icae_pretrain", mode="pretrain", **over), bundle=bundle)


def _samples():
    from ctxbench.core.types import History, Sample

    return [Sample(history=History(id=str(i), text=" ".join([t] * 4)), questions=[]) for i, t in enumerate(TEXTS)]


@pytest.mark.parametrize("over", [{"lambda_ae": 0.3}, {"lambda_ae": 1.0, "lm_tokens": 0},
                                  {"objective_sampling": True}])
def test_icae_loss_and_gradients_unchanged_tiny(over):
    m = _icae("tiny", mem_size=4, compression_rate=2, context_tokens=16, lm_tokens=over.pop("lm_tokens", 8),
              leave_tokens_for_lm=2, **over)
    ex = m.train_examples(_samples())
    _same_loss_and_grads(m, m.collate(ex[:2]), _icae_full_logits_loss, 1e-5)


def _lm_hf_loss(m, batch):
    return m.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss


def test_lm_loss_and_gradients_unchanged_tiny():
    from pathlib import Path

    from omegaconf import OmegaConf

    from ctxbench.config.schemas import load_conf_file

    conf = load_conf_file(Path(__file__).resolve().parents[1] / "conf" / "method" / "lm.yaml")
    m = build("method", OmegaConf.merge(conf, {"seq_len": 12}), bundle=load_model(option_config("model", {"name": "tiny"})))
    ex = m.train_examples(_samples())
    batch = m.collate([ex[0], ex[1][:7]])  # one row padded: labels -100 there
    _same_loss_and_grads(m, batch, _lm_hf_loss, 1e-5)


@pytest.mark.slow  # the packaged SmolLM2: one ICAE step on the settings (~15 s)
def test_icae_loss_and_gradients_unchanged_smollm2():
    m = _icae("smollm2_135m", mem_size=32, compression_rate=4, context_tokens=128, lm_tokens=0, lambda_ae=1.0)
    ex = m.train_examples(_samples() * 4)
    _same_loss_and_grads(m, m.collate(ex[:1]), _icae_full_logits_loss, 1e-5, grad_rel=2e-4)
