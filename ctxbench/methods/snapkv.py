"""``method=snapkv``: SnapKV — keep the slots an observation window of queries votes for.

Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation" (arXiv 2404.14469): the
last ``window`` queries of the prompt (the observation window) vote for the earlier keys with
their attention, summed over the window; the votes for the slots *before* the window are smoothed
by a 1-D average pooling over neighbouring positions (``kernel``, zero-padded at both ends, so a
kept token keeps its neighbours); each KV head keeps the top (budget − window) earlier slots and
the window itself. As the reference code (``snapkv_utils.py``: ``attn[..., -w:, :-w]``, pooled,
top-k) the window's votes for itself are not pooled, so they never lift the slots just before it.
The query heads of a KV group add their votes (one choice per KV head, as kvpress does).

On a fixed cache (:mod:`.kv_cache`) the press acts twice:

- at ingest, when a layer overflows its budget after a segment, the segment's last ``window``
  queries vote (question-agnostic: the question is not known yet);
- when the question arrives (``question_aware``), the question's last ``window`` queries vote
  over the ingested slots and the cache is cut to M slots of history + the question, which is
  SnapKV as published (window = the end of the prompt, which holds the question). With
  ``ingest_size`` > M the history is ingested into ``ingest_size`` slots and the question chooses
  the M it reads; with ``ingest_size`` ≥ the history's length this is SnapKV on the whole prompt.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ctxbench.config.schemas.method import SnapkvMethod
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.methods.kv_cache import QuestionAwareKVMethod
from ctxbench.methods.press import LayerKV, Press, SegmentInfo, gather_slots, top_with_recent


def pooled_votes(votes: torch.Tensor, kernel: int) -> torch.Tensor:
    """SnapKV's smoothing: 1-D average pooling over positions [b, h, L] (stride 1, same length)."""
    if kernel <= 1:
        return votes
    b, h, L = votes.shape
    return F.avg_pool1d(votes.reshape(b * h, 1, L), kernel, stride=1, padding=kernel // 2).view(b, h, L)


def prefix_votes(seg_score: torch.Tensor, n_window: int, kernel: int) -> torch.Tensor:
    """The votes [b, h, L] pooled over the slots before the observation window (its last ``n_window``
    slots) only, as the reference (``attn[..., -w:, :-w]``, then the pooling): the window's votes for
    itself never spill into the slots just before it. The window's own entries are 0 (it is kept)."""
    L = seg_score.shape[-1]
    return F.pad(pooled_votes(seg_score[..., : L - n_window], kernel), (0, n_window))


class SnapKVPress(Press):
    """Window votes, pooled; keep the window + the top-voted earlier slots (per KV head)."""

    needs_scores = True
    question_aware = True

    def __init__(self, window: int = 16, kernel: int = 7,
                 layer_budget: Callable[[int, int, int], int] | None = None):
        if window < 1:
            raise ConfigError(f"method.window={window}: must be ≥ 1")
        if kernel < 1 or kernel % 2 == 0:
            raise ConfigError(f"method.kernel={kernel}: must be an odd number ≥ 1 (the pooling keeps the length)")
        self.window, self.kernel = int(window), int(kernel)
        self.layer_budget = layer_budget

    def budget(self, layer_idx: int, n_layers: int, mem_size: int) -> int:
        return self.layer_budget(layer_idx, n_layers, mem_size) if self.layer_budget else mem_size

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        # the observation window is kept: at ingest the segment's last `window` slots; for the
        # question, the whole question (its slots are not part of the history budget)
        n_window = min(self.window, info.seg_len)
        kept_recent = info.seg_len if info.phase == "question" else n_window
        return gather_slots(kv, top_with_recent(prefix_votes(info.seg_score, n_window, self.kernel), budget, kept_recent))


def snapkv_press(cfg: Any, layer_budget: Callable[[int, int, int], int] | None = None) -> SnapKVPress:
    return SnapKVPress(cfg.window, cfg.kernel, layer_budget)


@register("method", "snapkv")
class SnapKV(QuestionAwareKVMethod):
    Settings = SnapkvMethod  # its config schema (ctxbench/config/schemas/method.py)
    def make_press(self) -> Press:
        if self.mem_size is not None and self.cfg.window >= self.mem_size:
            raise ConfigError(f"method.window={self.cfg.window} must be below method.mem_size={self.mem_size}")
        return snapkv_press(self.cfg)
