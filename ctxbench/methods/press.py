"""What a KV-cache *press* is: one small class that decides what a full cache layer keeps.

A press is applied on the model's own attention and cache (:mod:`.press_hooks`, in the manner of
NVIDIA's kvpress): a long text goes through ``model(ids, cache=DynamicCache)`` segment by segment,
and after each layer's attention over [cache + segment] the press brings that layer's cache back
to its budget. It sees one :class:`LayerKV` (keys, values, the original position of each slot, the
attention each slot has accumulated) and the attention the segment's queries just gave each slot;
it returns the slots to keep (:func:`gather_slots`) or new ones (LoCoCo's mixes).

A press declares what it needs, so the hooks compute only that:

- ``needs_scores``: attention received by each slot from the segment's queries (summed over the
  queries and the query heads of a KV group), recomputed from the layer's own q projection and
  rotary embedding, so the model keeps its fast attention kernel;
- ``window``: only the last ``window`` queries vote (SnapKV's observation window); None = all;
- ``question_aware``: the press also acts on the question segment, when it arrives at answer time
  (the others leave the question's KV untouched, as every fixed-cache method answers);
- ``budget(layer_idx, n_layers, mem_size)``: the layer's slot budget (PyramidKV's pyramid); M by
  default.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerKV:
    """One layer's cache: ``k``/``v`` [b, kv_heads, L, d], ``pos`` [b, kv_heads, L] the original token
    index of each slot (-1 for a mixed slot), ``score`` [b, kv_heads, L] accumulated attention."""

    k: torch.Tensor
    v: torch.Tensor
    pos: torch.Tensor
    score: torch.Tensor

    @property
    def slots(self) -> int:
        return int(self.k.shape[-2])

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


@dataclass
class SegmentInfo:
    """What a press knows about the segment that just ran through a layer."""

    layer_idx: int
    n_layers: int
    seg_len: int  # tokens of the segment (the last ``seg_len`` slots of the layer are its own)
    seg_score: torch.Tensor | None  # [b, kv, L] attention from this segment's (window) queries
    phase: str  # "ingest" | "question"


class Press:
    """Base of every press: keep-everything defaults; a subclass overrides :meth:`compress`."""

    needs_scores: bool = False
    window: int | None = None
    question_aware: bool = False

    def budget(self, layer_idx: int, n_layers: int, mem_size: int) -> int:
        return mem_size

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        """Bring ``kv`` (more than ``budget`` slots) back to at most ``budget`` slots."""
        raise NotImplementedError


def gather_slots(kv: LayerKV, idx: torch.Tensor) -> LayerKV:
    """Keep the slots ``idx`` [b, h, n] (per head), in the given order."""
    e = idx.unsqueeze(-1).expand(*idx.shape, kv.k.shape[-1])
    return LayerKV(kv.k.gather(2, e), kv.v.gather(2, e), kv.pos.gather(2, idx), kv.score.gather(2, idx))


def top_with_recent(score: torch.Tensor, keep: int, n_recent: int) -> torch.Tensor:
    """Slot indices [b, h, keep] in cache order: the ``n_recent`` last + the top (keep − n_recent) older
    ones by ``score`` [b, h, L] (H2O's heavy hitters + local window; LoCoCo's kept slots; SnapKV's
    with the window as the recent part)."""
    L = score.shape[-1]
    n_recent = max(0, min(n_recent, keep))
    n_top = keep - n_recent
    parts = []
    if n_top:
        parts.append(torch.topk(score[..., : L - n_recent], n_top, dim=-1).indices)
    if n_recent:
        recent = torch.arange(L - n_recent, L, device=score.device)
        parts.append(recent.view(1, 1, -1).expand(score.shape[0], score.shape[1], -1))
    return torch.cat(parts, dim=-1).sort(dim=-1).values

