"""Training-free fixed-cache baselines as presses: StreamingLLM, H2O, and the unbounded full cache.

All process text segment by segment through :mod:`.kv_cache` and differ only in what their press
keeps when a layer holds more than ``mem_size`` (M) slots after a segment:

- **StreamingLLM** (Xiao et al., 2023, arXiv 2309.17453): the first ``n_sink`` tokens ever seen
  (attention sinks) + the M − n_sink most recent tokens; positions are re-assigned inside the
  cache (``positions: cache``), as the paper does.
- **H2O** (Zhang et al., 2023, arXiv 2306.14048): the ``n_recent`` most recent tokens (local
  window) + the M − n_recent older tokens with the largest *accumulated* attention they received
  (summed over all queries that saw them, over query heads of a KV group), per layer and KV head.
- **full_cache**: never evicts (M = ∞); the reference every fixed-cache method is compared with
  (under ``task=compression`` too: it keeps all n slots at any ratio and records budget = n).
"""
from __future__ import annotations

from typing import Any

import torch

from ctxbench.config.schemas.method import FullCacheMethod, H2oMethod, StreamingllmMethod
from ctxbench.core.registry import register
from ctxbench.methods.kv_cache import FixedKVMethod
from ctxbench.methods.press import LayerKV, Press, SegmentInfo, gather_slots, top_with_recent


def sink_window_indices(length: int, mem_size: int, n_sink: int, like: torch.Tensor) -> torch.Tensor:
    """Slots StreamingLLM keeps of a cache of ``length``: [0, n_sink) and the last mem_size − n_sink."""
    n_sink = min(n_sink, mem_size)
    keep = list(range(n_sink)) + list(range(length - (mem_size - n_sink), length))
    idx = torch.tensor(keep, dtype=torch.long, device=like.device)
    return idx.view(1, 1, -1).expand(like.shape[0], like.shape[1], -1)


class SinkPress(Press):
    """StreamingLLM: attention sinks + a window of the most recent slots."""

    def __init__(self, n_sink: int):
        self.n_sink = int(n_sink)

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        return gather_slots(kv, sink_window_indices(kv.slots, budget, self.n_sink, kv.pos))


class H2OPress(Press):
    """H2O: heavy hitters by accumulated attention + a local window of ``n_recent`` slots."""

    needs_scores = True

    def __init__(self, n_recent: int):
        self.n_recent = int(n_recent)

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        return gather_slots(kv, top_with_recent(kv.score, budget, self.n_recent))


@register("method", "streamingllm", aliases=("streaming_llm", "sink"))
class StreamingLLM(FixedKVMethod):
    Settings = StreamingllmMethod  # its config schema (ctxbench/config/schemas/method.py)
    def make_press(self) -> Press:
        return SinkPress(self.cfg.n_sink)


@register("method", "h2o")
class H2O(FixedKVMethod):
    Settings = H2oMethod  # its config schema (ctxbench/config/schemas/method.py)
    def make_press(self) -> Press:
        n_recent = self.cfg.n_recent
        if n_recent is None:  # the H2O paper's default split: half heavy hitters, half recent (of M now)
            n_recent = (self.slot_budget() or 0) // 2
        return H2OPress(int(n_recent))


@register("method", "full_cache", aliases=("full_kv",))
class FullCache(FixedKVMethod):
    Settings = FullCacheMethod  # its config schema (ctxbench/config/schemas/method.py)
    whole_history_baseline = True  # every KV slot kept (health.warnings: expected)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.mem_size = None  # unbounded by definition

    def history_budget(self, n: int) -> int | None:
        """The reference under a ratio too: it keeps all n slots (recorded as its budget)."""
        return n

    def slot_budget(self) -> int | None:
        return None

    def make_press(self) -> Press | None:
        return None
