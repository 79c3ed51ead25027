"""A KV-press plug-in, loaded with ``plugins=docs/examples/keep_norms.py`` (docs/plugins.md, "A KV press").

KeepNorms keeps, per layer and KV head, the slots whose keys have the smallest L2 norm (kvpress's KnormPress
rule) and the most recent ``window`` slots; it runs in ctxbench's fixed KV cache like StreamingLLM or H2O.
"""
from dataclasses import dataclass

import torch

from ctxbench.api import FixedCacheSettings, FixedKVMethod, LayerKV, Press, SegmentInfo, gather_slots, register, setting


class KeepNormsPress(Press):
    def __init__(self, window: int):
        self.window = int(window)

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        n_recent = min(self.window, budget)
        older = kv.slots - n_recent
        score = -kv.k[..., :older, :].norm(dim=-1)  # a small key norm: a slot worth keeping
        top = torch.topk(score, budget - n_recent, dim=-1).indices
        recent = torch.arange(older, kv.slots, device=kv.k.device).expand(*score.shape[:2], n_recent)
        return gather_slots(kv, torch.cat([top, recent], dim=-1).sort(dim=-1).values)


@register("method", "keep_norms")
class KeepNorms(FixedKVMethod):
    """Low key norms + a recent window, at the fixed cache size method.mem_size."""

    @dataclass
    class Settings(FixedCacheSettings):  # method.segment_len, mem_size, positions, max_new_tokens, and:
        window: int = setting(8, "the most recent slots always kept", None)

    def make_press(self) -> Press:
        return KeepNormsPress(self.cfg.window)
