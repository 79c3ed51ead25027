"""The work a press adds to ingestion, counted rather than timed (issue 39's throughput bar; robust on a
noisy shared machine): per segment the q projection runs once per layer (the votes reuse the model's
own, they do not run it again), the attention scores are computed once per voting layer and never for
StreamingLLM, and ingestion never runs the LM head. SnapKV's window votes, now rotated for
the window's rows alone, are still the model's own attention weights of those rows.
"""
from __future__ import annotations

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.methods.kv_baselines import H2OPress, SinkPress
from ctxbench.methods.kv_cache import KVState, PressRunner
from ctxbench.methods.press import LayerKV, SegmentInfo
from ctxbench.methods.snapkv import SnapKVPress
from ctxbench.models.loading import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"})).model.eval()


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 250, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("press, votes", [(SinkPress(2), False), (H2OPress(4), True), (SnapKVPress(4, 3), True)])
@torch.no_grad()
def test_ingest_runs_each_q_projection_once_scores_only_where_voted_and_no_lm_head(tiny, press, votes):
    runner = PressRunner(tiny, 12, press, positions="cache" if isinstance(press, SinkPress) else "absolute")
    n_layers, n_seg, T = len(runner.attn), 5, 8
    q_calls, head_rows = [0], []
    hooks = [a.q_proj.register_forward_hook(lambda m, a, o: q_calls.__setitem__(0, q_calls[0] + 1)) for a in runner.attn]
    hooks.append(tiny.lm_head.register_forward_hook(lambda m, a, o: head_rows.append(a[0].shape[1])))
    try:
        state = runner.stream(KVState(), ids_of(n_seg * T), T)
    finally:
        for h in hooks:
            h.remove()
    assert state.slots == 12 and state.n_seen == n_seg * T
    assert q_calls[0] == n_layers * n_seg  # the model's own projections only: no recompute for the votes
    assert runner.score_calls == (n_layers * n_seg if votes else 0)
    assert head_rows == []  # ingestion reads no logits: the decoder alone, no LM head


class Recording(SnapKVPress):
    """SnapKV that keeps the votes it was given, per layer."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: dict[int, torch.Tensor] = {}

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        self.seen[info.layer_idx] = info.seg_score.clone()
        return super().compress(kv, info, budget)


@torch.no_grad()
def test_snapkv_window_votes_are_the_eager_attention_of_the_window_rows(tiny):
    """Two segments of 10 over M = 8: the second segment's votes (last 4 queries over the 8 kept
    slots + its own 10) are the sums of the model's own eager attention weights of those rows."""
    assert tiny.config._attn_implementation == "eager"
    press = Recording(window=4, kernel=1)
    runner = PressRunner(tiny, 8, press)
    n_kv = tiny.config.num_key_value_heads
    groups = tiny.config.num_attention_heads // n_kv
    weights: dict[int, torch.Tensor] = {}
    hooks = [a.register_forward_hook(lambda m, args, out: weights.__setitem__(m.layer_idx, out[1])) for a in runner.attn]
    state, ids = KVState(), ids_of(20, seed=2)
    try:
        runner.forward(state, ids[:, :10])
        runner.forward(state, ids[:, 10:])
    finally:
        for h in hooks:
            h.remove()
    for i in range(len(runner.attn)):
        w = weights[i][0, :, -4:].float()  # [heads, window, 8 + 10]
        want = w.sum(dim=1).view(n_kv, groups, -1).sum(dim=1)
        assert torch.allclose(press.seen[i][0], want, atol=1e-5), i
