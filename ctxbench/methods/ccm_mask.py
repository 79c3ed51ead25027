"""CCM's parallel layout: one sequence ``[ctx_1][COMP_1]...[ctx_T][COMP_T][target]`` whose attention
mask, position ids and (for merge) averaged memory keys/values reproduce recurrent compression.

What each token sees (``step`` = 1..T for steps, T+1 for the target):

- **concat** — the tokens of its own step (causally) and the COMP tokens of every earlier step;
  never earlier raw context. That is exactly step-by-step compression where memory is the list of
  all earlier COMP key/values (reference ``get_comp_attn_mask_concat_recur``).
- **merge** — its own step (causally) and the merged memory after step t-1: slot k is the mean,
  over steps s ≤ t-1, of COMP token k's key/value (the paper's running average a_t = 1/t). The
  reference adds SUM tokens whose KV are overwritten by that average; here the merged memories are
  appended as extra key/value columns inside attention (``A @ K`` with an averaging matrix ``A``),
  which is the same computation without extra query tokens. Exactly equal to the recurrent merge
  (up to float rounding of a mean vs a running mean).

Non-recurrent (``method.recurrent: false``, the reference's form for MetaICL and LaMP): each step
sees only itself, so each demonstration is compressed on its own; only the target reads memory (all
COMP tokens for concat, their mean for merge). Inference compresses each step with no past.

Positions follow the reference's "skip" scheme (``update_position_ids``): text tokens are numbered
by the count of text tokens before them (COMP tokens do not advance it); COMP token k of a step sits
at last-text-position + 1 + k. Inference keeps the same counter, so both forms see equal positions.

The extended keys need a custom attention function: ``ccm_eager`` / ``ccm_sdpa`` wrap the model's
own eager / SDPA attention and add the merged columns when the module's :class:`ParallelState` holds
an averaging matrix; otherwise they call the base function unchanged.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from ctxbench.core.errors import ConfigError
from ctxbench.methods.base import additive, past_then_causal


@dataclass
class Layout:
    """Per-token arrays of one example (python lists, collated later)."""

    input_ids: list[int]
    is_comp: list[int]
    comp_k: list[int]  # index of the COMP token within its step, -1 for text
    step: list[int]  # 1..T for steps, T+1 for the target
    pos: list[int]
    labels: list[int]
    n_steps: int


def build_layout(steps: list[list[int]], n_tok: int, placeholder: int, target: list[int] | None = None,
                 target_labels: list[int] | None = None, loss_steps_from: int = 2) -> Layout:
    """Lay steps and an optional target out in one sequence.

    Labels: inside every step ``t >= loss_steps_from`` each text token predicts the next text token
    of the same step (the continuation read from compressed memory); in the target the labels are
    ``target_labels`` (token ids or -100, aligned with ``target``: label i is what position i predicts).
    """
    ids: list[int] = []
    is_comp: list[int] = []
    comp_k: list[int] = []
    step: list[int] = []
    pos: list[int] = []
    labels: list[int] = []
    text_pos = 0
    for t, toks in enumerate(steps, 1):
        n = len(toks)
        ids += list(toks)
        is_comp += [0] * n
        comp_k += [-1] * n
        step += [t] * n
        pos += list(range(text_pos, text_pos + n))
        if t >= loss_steps_from:
            labels += list(toks[1:]) + [-100]
        else:
            labels += [-100] * n
        text_pos += n
        ids += [placeholder] * n_tok
        is_comp += [1] * n_tok
        comp_k += list(range(n_tok))
        step += [t] * n_tok
        pos += list(range(text_pos, text_pos + n_tok))  # last text pos + 1 + k
        labels += [-100] * n_tok
    if target:
        if target_labels is None:
            target_labels = list(target[1:]) + [-100]
        if len(target_labels) != len(target):
            raise ValueError("target_labels must align with target")
        n = len(target)
        ids += list(target)
        is_comp += [0] * n
        comp_k += [-1] * n
        step += [len(steps) + 1] * n
        pos += list(range(text_pos, text_pos + n))
        labels += list(target_labels)
    return Layout(ids, is_comp, comp_k, step, pos, labels, len(steps))


def collate_layouts(layouts: list[Layout], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad layouts into tensors (pads have step 0, valid 0)."""
    n = max(len(l.input_ids) for l in layouts)
    b = len(layouts)
    out = {"input_ids": torch.full((b, n), pad_id, dtype=torch.long),
           "is_comp": torch.zeros((b, n), dtype=torch.bool),
           "comp_k": torch.full((b, n), -1, dtype=torch.long),
           "step": torch.zeros((b, n), dtype=torch.long),
           "position_ids": torch.zeros((b, n), dtype=torch.long),
           "labels": torch.full((b, n), -100, dtype=torch.long),
           "valid": torch.zeros((b, n), dtype=torch.bool),
           "n_steps": torch.tensor([l.n_steps for l in layouts], dtype=torch.long)}
    for i, l in enumerate(layouts):
        m = len(l.input_ids)
        out["input_ids"][i, :m] = torch.tensor(l.input_ids)
        out["is_comp"][i, :m] = torch.tensor(l.is_comp, dtype=torch.bool)
        out["comp_k"][i, :m] = torch.tensor(l.comp_k)
        out["step"][i, :m] = torch.tensor(l.step)
        out["position_ids"][i, :m] = torch.tensor(l.pos)
        out["labels"][i, :m] = torch.tensor(l.labels)
        out["valid"][i, :m] = True
    return out


def reads_memory(step: torch.Tensor, n_steps: torch.Tensor | None, recurrent: bool) -> torch.Tensor:
    """Boolean ``[B, L]``: may the token read compressed memory. Recurrent: every step after the first
    (each compression reads the memory before it). Non-recurrent (the reference's MetaICL / LaMP
    masks, ``get_comp_attn_mask_concat`` / ``_merge``): only the target, so each step is compressed
    on its own."""
    if recurrent:
        return step > 1
    if n_steps is None:
        raise ValueError("the non-recurrent mask needs n_steps (the target is step n_steps + 1)")
    return step == n_steps.to(step.device)[:, None] + 1


def allowed_real(step: torch.Tensor, is_comp: torch.Tensor, valid: torch.Tensor, mode: str,
                 n_steps: torch.Tensor | None = None, recurrent: bool = True) -> torch.Tensor:
    """Boolean ``[B, L, L]``: may query i attend real key j."""
    L = step.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=step.device).tril()
    sq, sk = step[:, :, None], step[:, None, :]
    ok = (sq == sk)
    if mode == "concat":
        ok = ok | (is_comp[:, None, :] & (sk < sq) & reads_memory(step, n_steps, recurrent)[:, :, None])
    elif mode != "merge":
        raise ConfigError(f"method.mode must be 'concat' or 'merge', got {mode!r}")
    ok = ok & causal & valid[:, None, :] & valid[:, :, None]
    eye = torch.eye(L, dtype=torch.bool, device=step.device)
    return ok | (eye & ~valid[:, :, None])  # pads see themselves (no empty softmax rows)


def merge_matrix(step: torch.Tensor, is_comp: torch.Tensor, comp_k: torch.Tensor, valid: torch.Tensor,
                 n_tok: int, n_steps: int) -> torch.Tensor:
    """Averaging matrix ``[B, S*n_tok, L]``: row (s-1)*n+k is the mean of COMP-k keys of steps ≤ s."""
    s_idx = torch.arange(1, n_steps + 1, device=step.device).repeat_interleave(n_tok)  # [S*n]
    k_idx = torch.arange(n_tok, device=step.device).repeat(n_steps)
    sel = (is_comp & valid)[:, None, :] & (comp_k[:, None, :] == k_idx[None, :, None]) \
        & (step[:, None, :] <= s_idx[None, :, None])
    a = sel.float()
    return a / a.sum(-1, keepdim=True).clamp(min=1.0)


def allowed_merged(step: torch.Tensor, valid: torch.Tensor, n_tok: int, n_steps: int,
                   steps_of: torch.Tensor | None = None, recurrent: bool = True) -> torch.Tensor:
    """Boolean ``[B, L, S*n_tok]``: query of step t sees merged memory s = t-1 (non-recurrent: the
    target only, ``steps_of`` being each example's step count)."""
    s_idx = torch.arange(1, n_steps + 1, device=step.device).repeat_interleave(n_tok)
    reads = reads_memory(step, steps_of, recurrent)
    return (step[:, :, None] - 1 == s_idx[None, None, :]) & valid[:, :, None] & reads[:, :, None]


def parallel_mask(batch: dict[str, torch.Tensor], mode: str, n_tok: int, dtype: torch.dtype,
                  recurrent: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The 4-D additive mask for the parallel forward and, for merge, the averaging matrix."""
    step, is_comp, valid, steps_of = batch["step"], batch["is_comp"], batch["valid"], batch["n_steps"]
    real = allowed_real(step, is_comp, valid, mode, steps_of, recurrent)
    if mode == "concat":
        return additive(real, dtype), None
    s = int(steps_of.max())
    avg = merge_matrix(step, is_comp, batch["comp_k"], valid, n_tok, s)
    ext = allowed_merged(step, valid, n_tok, s, steps_of, recurrent)
    return additive(torch.cat([real, ext], dim=-1), dtype), avg


def causal_with_past(q: int, past: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """``[1, 1, q, past + q]`` additive mask: all of the past, causal within the new tokens."""
    return additive(past_then_causal(q, past, device)[None], dtype)


# ---- attention function with merged-memory columns ---------------------------------------------

class ParallelState:
    """Set per forward: the averaging matrix ``[B, E, L]`` of merged memories (merge mode), or None."""

    def __init__(self) -> None:
        self.avg: torch.Tensor | None = None


def _fallback_eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _base_function(base: str, module: Any):
    if base == "eager":  # the model's own eager function (bitwise the same as without CCM)
        return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", _fallback_eager)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[base]


def _make_attention(base: str):
    # ``dropout`` may come positionally (kvpress, once imported, wraps every registered attention
    # function and passes it 6th); it goes on by name, since eager's 6th parameter is ``scaling``
    def ccm_attention(module, query, key, value, attention_mask, dropout=0.0, **kwargs):
        state = getattr(module, "ccm_state", None)
        avg = state.avg if state is not None else None
        if avg is not None:
            a = avg.to(key.dtype)[:, None]  # [B, 1, E, L]
            key = torch.cat([key, torch.matmul(a, key)], dim=2)
            value = torch.cat([value, torch.matmul(a, value)], dim=2)
        if attention_mask is not None and attention_mask.is_floating_point() and attention_mask.dtype != query.dtype:
            attention_mask = attention_mask.to(query.dtype)  # autocast: SDPA wants the query's dtype
        return _base_function(base, module)(module, query, key, value, attention_mask, dropout=dropout, **kwargs)

    ccm_attention.__name__ = f"ccm_{base}_attention"
    return ccm_attention


SUPPORTED_BASES = ("eager", "sdpa")


def use_ccm_attention(model: Any, state: ParallelState) -> str:
    """Register ``ccm_<base>`` attention, switch ``model`` to it and attach ``state`` to its attention
    modules. Returns the new implementation name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    base = model.config._attn_implementation or "eager"
    if base.startswith("ccm_"):
        base = base[4:]
    if base not in SUPPORTED_BASES:
        raise ConfigError(f"CCM needs model.attn_implementation eager or sdpa (merged-memory columns are added inside "
                          f"attention); got {base!r}")
    name = f"ccm_{base}"
    AttentionInterface.register(name, _make_attention(base))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    model.set_attn_implementation(name)
    if model.config._attn_implementation != name:
        raise RuntimeError(f"could not switch {type(model).__name__} to attention {name!r}")
    n = 0
    for m in model.modules():
        if hasattr(m, "k_proj") and hasattr(m, "o_proj"):
            m.ccm_state = state
            n += 1
    if not n:
        raise ConfigError(f"CCM needs attention modules with k_proj / o_proj; model {type(model).__name__} has none")
    return name
