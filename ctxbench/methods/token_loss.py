"""The next-token loss of every trainable method, without full-vocabulary logits held for backward.

``token_loss(hidden, head, targets, weights)``: ``hidden`` holds only the rows that carry a label
(the caller selects them from the body's hidden states, so positions without a label never reach
the LM head), ``head`` is the output embedding (``nn.Linear``). The rows go through the head and
cross-entropy ``chunk`` rows at a time, and the gradient with respect to ``hidden`` (and to the
head's weight when that is trained) is computed in the same pass: backward then only scales what
forward kept, a ``rows × hidden`` tensor instead of ``rows × vocab`` float32 logits, their
log-softmax and its gradient (the fused linear + cross-entropy of Liger-Kernel, written for plain
torch). The loss and the gradients equal ``F.cross_entropy(head(hidden).float(), targets)`` to
float rounding (tests/test_token_loss.py).

``weights`` gives each row its share of the loss (``None`` = the token mean): ICAE's
λ·mean(AE) + (1−λ)·mean(LM) is one weighted sum. The per-row losses come back detached, for stats.

Falls back to the head module + ``F.cross_entropy`` per chunk (autograd keeps each chunk's logits)
when the head's weight is a DeepSpeed ZeRO-3 partition (only the module's own hooks gather it), and
when no gradient is wanted (``torch.no_grad``, nothing trainable upstream).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

LOGIT_ELEMENTS = 1 << 23  # float32 logits computed at once: 32 MB (170 rows at SmolLM2's 49,152-token vocab)


def chunk_rows(vocab: int) -> int:
    return max(1, LOGIT_ELEMENTS // max(1, vocab))


class _LinearCrossEntropy(torch.autograd.Function):
    """sum_i w_i · CE(h_i W^T + b, t_i), the gradient computed in forward (see the module doc)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, weights: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_b = bias is not None and ctx.needs_input_grad[2]
        tok = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if want_b else None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s: s + chunk]
            t = targets[s: s + chunk]
            logits = F.linear(h, weight, bias).float()
            lse = torch.logsumexp(logits, dim=-1)
            tok[s: s + chunk] = lse - logits.gather(1, t.unsqueeze(1)).squeeze(1)
            if not (want_h or want_w or want_b):
                continue
            g = logits.sub_(lse.unsqueeze(1)).exp_()  # softmax, in place of the logits
            g[torch.arange(t.shape[0], device=t.device), t] -= 1.0
            g.mul_(weights[s: s + chunk].unsqueeze(1))  # d loss / d logits
            if want_h:
                grad_h[s: s + chunk] = (g.to(weight.dtype) @ weight).to(hidden.dtype)
            if want_w:
                grad_w.addmm_(g.t(), h.float())
            if want_b:
                grad_b.add_(g.sum(0))
        ctx.save_for_backward(*(x for x in (grad_h, grad_w, grad_b) if x is not None))
        ctx.has = (grad_h is not None, grad_w is not None, grad_b is not None)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(tok)
        return (tok * weights).sum(), tok

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_tok: Any) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        gh, gw, gb = (next(saved) if has else None for has in ctx.has)
        return (None if gh is None else gh * grad_loss.to(gh.dtype),
                None if gw is None else (gw * grad_loss).to(ctx.dtypes[0]),
                None if gb is None else (gb * grad_loss).to(ctx.dtypes[1]),
                None, None, None)


def token_loss(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor,
               weights: torch.Tensor | None = None, chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, per-row losses)`` for labelled rows ``hidden`` (rows × hidden) with ``targets`` (rows,):
    ``loss`` = Σ weights · CE (the mean when ``weights`` is None), per-row losses detached float32."""
    n = hidden.shape[0]
    if weights is None:
        weights = torch.full((n,), 1.0 / max(n, 1), dtype=torch.float32, device=hidden.device)
    weight = head.weight
    chunk = chunk or chunk_rows(weight.shape[0])
    grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if hasattr(weight, "ds_id") or not grads:  # a ZeRO-3 partition (the module's hooks gather it), or no backward
        toks = [F.cross_entropy(head(hidden[s: s + chunk]).float(), targets[s: s + chunk], reduction="none")
                for s in range(0, n, chunk)]
        tok = torch.cat(toks) if toks else hidden.new_zeros(0, dtype=torch.float32)
        return (tok * weights).sum(), tok.detach()
    loss, tok = _LinearCrossEntropy.apply(hidden, weight, getattr(head, "bias", None), targets, weights.float(), chunk)
    return loss, tok
