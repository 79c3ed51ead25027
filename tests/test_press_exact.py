"""KV presses exact on every device (issue 36 items 3, 4, 11): what the cache holds is what the plain
model computes on the kept tokens, in bf16 too, on a Mistral config with a sliding window, and H2O's
scores are the attention the real model gave.

- positions=cache in bf16: after 400 segments every kept key equals the plain model's key at its slot
  (one rotation) to bf16 precision; ``ctxbench.bench.press_drift.rotation_drift`` is also the measurement the
  docs quote and the GPU check runs (``bench suite=gpu``, part drift).
- a Mistral config whose window (8) is below the working set: the press cache holds every slot.
- H2O through the real hooks: the accumulated scores are the sums of the eager attention columns.
"""
from __future__ import annotations

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.core.registry import build
from ctxbench.methods.kv_baselines import H2OPress, SinkPress
from ctxbench.methods.kv_cache import KVState, PressRunner
from ctxbench.methods.press import LayerKV, SegmentInfo
from ctxbench.methods.press_hooks import rotate
from ctxbench.bench.press_drift import ids_of, rotation_drift
from ctxbench.models.loading import load_model

BF16 = torch.bfloat16


# ---- item 3: StreamingLLM's kept keys in bf16 --------------------------------------------------

EPS = 2.0 ** -8  # bf16's unit roundoff


def bf16_runner(mem_size: int, n_sink: int, head_dim: int = 128) -> PressRunner:
    bundle = load_model(option_config("model", {"name": "tiny", "num_layers": 1, "hidden_size": head_dim,
                                                "num_heads": 1, "num_kv_heads": 1, "dtype": "bfloat16"}))
    return PressRunner(bundle.model, mem_size, SinkPress(n_sink), positions="cache")


@torch.no_grad()
def test_cache_positions_keep_every_key_one_rotation_after_400_segments_in_bf16():
    """The runner's compression step alone, 400 times at head_dim 128 (a LoCoMo conversation at 64
    tokens a segment): keys enter rotated at their slot in bf16, as the model rotates them, and after
    the last compression each kept key equals its pre-rotation key rotated once to its final slot."""
    T, M, n_sink, d = 64, 96, 4, 128
    run = bf16_runner(M, n_sink, d)
    g = torch.Generator().manual_seed(0)
    k0 = (torch.randn(1, 1, 400 * T, d, generator=g) * 3).to(BF16)  # pre-rotation keys, a real model's scale

    cos, sin = run.rope(k0, torch.arange(M + T).view(1, -1))

    def at_slots(k: torch.Tensor, start: int) -> torch.Tensor:  # what the model's attention does, in bf16
        n = k.shape[-2]
        return rotate(k, cos[:, start:start + n], sin[:, start:start + n])

    kv = None
    for s in range(400):
        L = kv.slots if kv is not None else 0
        new = at_slots(k0[:, :, s * T:(s + 1) * T], L)
        pos = torch.arange(s * T, (s + 1) * T).view(1, 1, T)
        kv = LayerKV(new, new, pos, torch.zeros(1, 1, T)) if kv is None else \
            LayerKV(torch.cat([kv.k, new], 2), torch.cat([kv.v, new], 2), torch.cat([kv.pos, pos], 2),
                    torch.zeros(1, 1, L + T))
        if kv.slots > M:
            kv = run.squeeze(kv, SegmentInfo(0, 1, T, None, "ingest"), M)
    kept = kv.pos[0, 0]
    assert kept.tolist() == list(range(n_sink)) + list(range(400 * T - (M - n_sink), 400 * T))
    want = at_slots(k0[:, :, kept], 0)
    rel = ((kv.k.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1))[0, 0]
    assert kv.k.dtype == BF16
    assert torch.equal(kv.k[:, :, :n_sink], want[:, :, :n_sink])  # a sink never moves: untouched
    assert float(rel[n_sink:].max()) <= 2 * EPS, rel  # a window key moved once: one more rounding


def test_streamingllm_keys_through_the_model_in_bf16_stay_one_rotation():
    """The same through the model's own attention and the hooks (60 segments: 1 s on the CPU)."""
    d = rotation_drift(segments=60)
    assert d["sink_max"] == 0.0, d  # the sinks are the model's own keys
    assert d["window_max"] <= 4 * EPS, d  # a window key moves once per segment while kept (3 moves)


def test_the_rotation_before_the_fix_stays_measurable_and_drifts():
    """rotation="bf16" re-rotates as before the fix (cache dtype, bf16 cos/sin): the sinks drift off
    the model's keys and the logit error is far above the fixed runner's, on the same 60 segments."""
    before, after = rotation_drift(segments=60, rotation="bf16"), rotation_drift(segments=60)
    assert before["sink_max"] > 10 * EPS and after["sink_max"] == 0.0, (before, after)
    assert before["logit_err_max"] > 5 * after["logit_err_max"], (before, after)
    with pytest.raises(ValueError, match="rotation='fp16'"):
        rotation_drift(segments=2, rotation="fp16")


# ---- item 4: a model with a sliding window gets full cache layers -------------------------------

@pytest.fixture(scope="module")
def mistral():
    """A tiny random Mistral whose sliding window (8) is below every working set here."""
    from transformers import MistralConfig, MistralForCausalLM

    conf = MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         sliding_window=8, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MistralForCausalLM(conf).eval()


@torch.no_grad()
def test_full_cache_on_a_sliding_window_model_keeps_every_slot(mistral):
    ids = ids_of(40)
    outs = []
    state = PressRunner(mistral, None, None).stream(KVState(), ids, 4, on_logits=lambda s, lg: outs.append(lg))
    assert [layer.slots for layer in state.layers] == [40, 40]
    assert all(int(layer.pos[0, 0, -1]) == 39 and layer.pos.shape[-1] == 40 for layer in state.layers)
    # every segment attended the whole past: the same weights with no window, in one pass
    mistral.config.sliding_window = None
    try:
        ref = mistral(ids).logits
    finally:
        mistral.config.sliding_window = 8
    got = torch.cat(outs, dim=1)
    assert torch.allclose(got, ref, atol=1e-5, rtol=0), (got - ref).abs().max()


@torch.no_grad()
def test_a_press_on_a_sliding_window_model_holds_its_budget_above_the_window(mistral):
    runner = PressRunner(mistral, 12, H2OPress(n_recent=4))  # working set 12 + 4 = 16 > window 8
    state = runner.stream(KVState(), ids_of(40), 4)
    assert [layer.slots for layer in state.layers] == [12, 12] and state.peak_slots == 16
    for layer in state.layers:  # the bookkeeping and the cache agree: the last 4 tokens are the window
        assert layer.k.shape[-2] == layer.pos.shape[-1] == 12
        assert layer.pos[0, 0, -4:].tolist() == [36, 37, 38, 39]
    new, _ = runner.generate(state, [5, 6, 7], max_new_tokens=3, stop_ids=[], pad_id=0, min_new_tokens=3)
    assert len(new) == 3


# ---- item 11 (H2O): scores accumulated through the real hooks ----------------------------------

@torch.no_grad()
def test_h2o_scores_are_the_eager_attention_columns_accumulated_over_segments():
    """H2O over 6 segments on the tiny model (eager attention, so each attention module also returns
    its weights): after every segment, each kept slot's score is the sum of the attention columns
    every query so far gave it (over the query heads of its KV group), as read from the model's own
    attention weights, and the kept slots are H2O's rule applied to those sums."""
    bundle = load_model(option_config("model", {"name": "tiny"}))
    model = bundle.model
    assert model.config._attn_implementation == "eager"
    T, M, n_recent = 8, 20, 6
    runner = PressRunner(model, M, H2OPress(n_recent))
    n_kv = model.config.num_key_value_heads
    groups = model.config.num_attention_heads // n_kv
    weights: dict[int, torch.Tensor] = {}
    hooks = [a.register_forward_hook(lambda m, args, out: weights.__setitem__(m.layer_idx, out[1]))
             for a in runner.attn]
    expect: list[dict[tuple[int, int], float]] = [{} for _ in runner.attn]  # layer → (kv head, token) → score
    state, ids = KVState(), ids_of(6 * T, seed=5)
    try:
        for s in range(0, ids.shape[1], T):
            before = [layer.pos[0] for layer in state.layers] or [torch.empty(n_kv, 0, dtype=torch.long)] * len(runner.attn)
            runner.forward(state, ids[:, s:s + T])
            for i, layer in enumerate(state.layers):
                w = weights[i][0].float()  # [heads, T, L + T]: this segment's queries over the slots
                cols = w.sum(dim=1).view(n_kv, groups, -1).sum(dim=1)  # [kv, L + T]
                slots = torch.cat([before[i], torch.arange(s, s + T).expand(n_kv, T)], dim=1)
                for h in range(n_kv):
                    for j, p in enumerate(slots[h].tolist()):
                        expect[i][h, p] = expect[i].get((h, p), 0.0) + float(cols[h, j])
                for h in range(n_kv):
                    kept = layer.pos[0, h].tolist()
                    want = torch.tensor([expect[i][h, p] for p in kept])
                    assert torch.allclose(layer.score[0, h], want, atol=1e-5), (s, i, h)
                    # H2O's rule on the independent sums: the window + the top older ones
                    held = sorted(p for (hh, p) in expect[i] if hh == h and p in slots[h].tolist())
                    older = held[: len(held) - n_recent] if len(held) > M else []
                    top = sorted(older, key=lambda p: -expect[i][h, p])[: M - n_recent]
                    assert kept == (sorted(top) + held[len(held) - n_recent:] if older else held), (s, i, h)
    finally:
        for h in hooks:
            h.remove()
    assert state.slots == M


def test_ccm_memory_above_the_window_is_read_whole(mistral):
    """CCM hands its memory to the decoder as a cache: every slot, not the window's last ones."""
    from types import SimpleNamespace

    from ctxbench.methods.ccm import CCM, Memory

    kv = lambda i: torch.full((1, 2, 20, 16), float(i))  # 20 memory slots > window 8
    mem = Memory(keys=[kv(0), kv(1)], values=[kv(2), kv(3)])
    cache = CCM._cache(SimpleNamespace(model=mistral), mem)
    assert [tuple(layer.keys.shape) for layer in cache.layers] == [(1, 2, 20, 16)] * 2
