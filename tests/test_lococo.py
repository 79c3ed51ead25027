"""LoCoCo on the tiny random Llama: the compressor's rule, the fixed cache, calibration.

Shows: overflowing caches come back to exactly M slots (heavy hitters by the segment's attention +
conv-mixed slots); with λ = 0 the mixed slots are the top remaining slots, and every mixed slot is
a convex combination; M ≥ length reproduces the full model; a calibration step lowers the loss
and trains only the compressors; checkpoints round-trip.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.methods.kv_cache import KVState
from ctxbench.methods.press import LayerKV, SegmentInfo
from ctxbench.methods.lococo import ConvCompressor
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.core.types import History, Sample
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"}))


def lococo(bundle, **kw):
    cfg = {"name": "lococo", "segment_len": 16, "mem_size": 32, "n_segments": 4, "kernel_size": 5, "local_len": 0, **kw}
    return build("method", option_config("method", cfg), bundle=bundle)


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 250, (1, n), generator=torch.Generator().manual_seed(seed))


def test_compressor_keeps_heavy_hitters_and_mixes_the_rest():
    torch.manual_seed(0)
    comp = ConvCompressor(head_dim=4, mem_size=6, hh_keep_rate=0.5, kernel_size=3)
    assert (comp.keep, comp.mem_compress) == (3, 3)
    L = 10
    pos = torch.arange(L).view(1, 1, L).expand(1, 2, L).clone()
    k = torch.randn(1, 2, L, 4)
    v = torch.full((1, 2, L, 4), 7.0)
    score = torch.tensor([[[0, 9, 0, 1, 8, 2, 0, 7, 3, 4], [5, 0, 0, 0, 0, 0, 6, 0, 7, 0.5]]])
    out = comp.compress(LayerKV(k, v, pos, torch.zeros(1, 2, L)), SegmentInfo(0, 1, 2, score, "ingest"), 6)
    assert out.k.shape == (1, 2, 6, 4) and out.v.shape == (1, 2, 6, 4)
    assert out.pos[0, 0].tolist() == [1, 4, 7, -1, -1, -1]  # heavy hitters by the segment's scores, in order
    assert out.pos[0, 1].tolist() == [0, 6, 8, -1, -1, -1]
    assert torch.equal(out.k[0, 0, :3], k[0, 0, [1, 4, 7]])
    assert torch.allclose(out.v[..., 3:, :], torch.full((1, 2, 3, 4), 7.0))  # convex mixes of equal values


def test_compressor_with_zero_lambda_is_top_k_selection():
    comp = ConvCompressor(head_dim=4, mem_size=4, hh_keep_rate=0.5, kernel_size=3, normalizer_init=0.0)
    L = 8
    k = torch.randn(1, 1, L, 4)
    score = torch.tensor([[[9, 0, 8, 5, 0, 6, 1, 0]]], dtype=torch.float32)
    out = comp(LayerKV(k, k + 1, torch.arange(L).view(1, 1, L), score))
    # heavy hitters 0, 2; among the rest (1, 3, 4, 5, 6, 7) the top-2 by score are 3 and 5
    assert torch.allclose(out.k[0, 0], k[0, 0, [0, 2, 3, 5]])


def test_large_cache_equals_full_model(tiny):
    ids = ids_of(80)
    with torch.no_grad():
        ref = tiny.model(ids).logits
    for positions in ("absolute", "cache"):
        m = lococo(tiny, mem_size=80, positions=positions)
        outs = []
        with torch.no_grad():
            m.runner().stream(KVState(), ids, 16, on_logits=lambda s, lg: outs.append(lg))
        assert torch.allclose(torch.cat(outs, 1), ref, atol=1e-5, rtol=0)


def test_cache_never_exceeds_mem_size(tiny):
    m = lococo(tiny, mem_size=24)
    runner, state = m.runner(), KVState()
    ids = ids_of(120)
    with torch.no_grad():
        for s in range(0, 120, 16):
            runner.forward(state, ids[:, s: s + 16])
            assert state.slots <= 24
            for layer in state.layers:
                assert layer.k.shape[2] == layer.v.shape[2] == state.slots
    assert state.slots == 24 and state.peak_slots == 40
    for layer in state.layers:  # hh_keep_rate 0.5 → the last half are fresh conv mixes (pos -1);
        assert (layer.pos[..., 12:] == -1).all()  # older mixes may survive among the heavy hitters


def test_calibration_step_reduces_loss_and_trains_only_the_compressor(tiny):
    torch.manual_seed(0)
    m = lococo(tiny, mem_size=16, normalizer_init=0.5)
    text = "the quick brown fox jumps over the lazy dog. " * 12
    ex = m.train_examples([Sample(History(id="t", text=text), [])])
    assert ex and all(len(e) == 64 for e in ex)
    batch = m.collate(ex[:2])
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("compressors.") for n in trainable)
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=0.05)
    m.train()
    first = m(batch)
    assert first.n_tokens == 2 * 4 * 15 and first.loss.requires_grad
    first.loss.backward()
    base_grads = [p.grad for n, p in m.named_parameters() if not n.startswith("compressors.")]
    assert all(g is None for g in base_grads)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.compressors.parameters())
    opt.step()
    losses = [float(first.loss.detach())]
    for _ in range(4):
        opt.zero_grad()
        out = m(batch)
        out.loss.backward()
        opt.step()
        losses.append(float(out.loss.detach()))
    assert min(losses[1:]) < losses[0] - 1e-3, losses


def test_trainable_state_round_trip(tiny):
    a, b = lococo(tiny, seed=1), lococo(tiny, seed=2)
    state = a.trainable_state_dict()
    assert state and all(k.startswith("compressors.") for k in state)
    b.load_trainable(state)
    ids = ids_of(64)[0]
    assert abs(a.perplexity(ids)["nll"] - b.perplexity(ids)["nll"]) < 1e-6


def test_bad_configs_are_named(tiny):
    with pytest.raises(ValueError, match="mem_size"):
        lococo(tiny, mem_size=None)
    with pytest.raises(ValueError, match="hh_keep_rate"):
        lococo(tiny, hh_keep_rate=1.5)


def test_lora_and_positional_interpolation_options():
    bundle = load_model(option_config("model", {"name": "tiny"}))  # a fresh copy: LoRA is injected in place
    m = lococo(bundle, lora={"enabled": True, "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
               rope_scaling_factor=2.0)
    names = {n for n, p in m.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in names) and any(n.startswith("compressors.") for n in names)
    assert all("lora_" in n or n.startswith("compressors.") for n in names)
    batch = {"input_ids": ids_of(64)}
    out = m(batch)
    out.loss.backward()
    assert any(p.grad is not None for n, p in m.named_parameters() if "lora_" in n)
    pos = m.runner().rope_positions(torch.arange(10, 14))  # linear interpolation: position p is read as p / 2
    assert pos.tolist() == [5.0, 5.5, 6.0, 6.5]
    assert lococo(load_model(option_config("model", {"name": "tiny"}))).runner().rope_positions(torch.arange(3)).tolist() == [0, 1, 2]
    assert lococo(bundle, rope_scaling_factor="auto").rope_factor() == 1.0  # 64 tokens fit the 4096 window: clamped
    groups = lococo(bundle, memory_lr_scale=1000).optimizer_param_groups(5e-5)  # (re-freezes the shared model)
    assert groups[0]["lr"] == pytest.approx(5e-2)


def test_lambda_is_clamped_so_mixes_stay_convex():
    """λ outside [0, 1] (calibration can push it there) acts as its bound: slots stay convex mixes."""
    torch.manual_seed(0)
    comp = ConvCompressor(head_dim=4, mem_size=4, hh_keep_rate=0.5, kernel_size=3)
    L = 9
    kv = LayerKV(torch.randn(1, 2, L, 4), torch.randn(1, 2, L, 4), torch.arange(L).view(1, 1, L).expand(1, 2, L),
                 torch.rand(1, 2, L))

    def mixed(lam: float) -> torch.Tensor:
        with torch.no_grad():
            comp.normalizer.fill_(lam)
            return comp(kv).v[..., 2:, :]

    assert torch.equal(mixed(1.7), mixed(1.0)) and torch.equal(mixed(-0.3), mixed(0.0))
    assert not torch.equal(mixed(0.5), mixed(1.0))
    out = mixed(0.5)
    assert (out <= kv.v.amax(2, keepdim=True) + 1e-6).all() and (out >= kv.v.amin(2, keepdim=True) - 1e-6).all()


def test_unclamped_lambda_leaves_the_convex_range_clamped_cannot(tiny):
    """clamp_lambda=false (the reference): λ = 1.7 extrapolates past the conv mix, so a new slot can
    leave the range of the slots it mixes; clamped, the same λ acts as 1 and stays inside."""
    L = 9
    kv = LayerKV(torch.randn(1, 2, L, 4), torch.randn(1, 2, L, 4), torch.arange(L).view(1, 1, L).expand(1, 2, L),
                 torch.rand(1, 2, L))
    lo, hi = kv.v.amin(2, keepdim=True) - 1e-6, kv.v.amax(2, keepdim=True) + 1e-6

    def mixed(clamp: bool, lam: float) -> torch.Tensor:
        torch.manual_seed(0)
        comp = ConvCompressor(head_dim=4, mem_size=4, hh_keep_rate=0.5, kernel_size=3, clamp_lambda=clamp)
        with torch.no_grad():
            comp.normalizer.fill_(lam)
            return comp(kv).v[..., 2:, :]

    for lam in (1.7, 2.5, -0.5, -1.5):
        out = mixed(True, lam)
        assert ((out >= lo) & (out <= hi)).all()
    assert torch.equal(mixed(True, 2.5), mixed(True, 1.0))
    free = torch.stack([mixed(False, lam) for lam in (2.5, -1.5)])
    assert ((free < lo) | (free > hi)).any()  # outside every convex mix of the slots
    assert torch.equal(mixed(False, 0.5), mixed(True, 0.5))  # inside [0, 1] the two agree
    # the option reaches every layer's compressor from the config; the CPU default clamps
    assert all(not c.clamp_lambda for c in lococo(tiny, clamp_lambda=False).compressors.per_layer)
    assert all(c.clamp_lambda for c in lococo(tiny).compressors.per_layer)
    assert load_conf_file("ctxbench/conf/method/lococo.yaml").clamp_lambda is True
    assert load_conf_file("ctxbench/conf/method/lococo_paper.yaml").clamp_lambda is False


def test_local_window_is_always_kept_among_the_heavy_hitters():
    """local_len (the reference's --local_len): the last slots stay whatever their scores."""
    comp = ConvCompressor(head_dim=4, mem_size=6, hh_keep_rate=0.5, kernel_size=3, local_len=2, normalizer_init=0.0)
    L = 10
    k = torch.randn(1, 1, L, 4)
    score = torch.tensor([[[0, 9, 0, 1, 8, 2, 0, 7, 0, 0]]], dtype=torch.float32)  # the last two score 0
    out = comp(LayerKV(k, k, torch.arange(L).view(1, 1, L), score))
    # keep = 3: one heavy hitter by score (slot 1) + the local window (8, 9); then the top-3 of the rest
    assert out.pos[0, 0, :3].tolist() == [1, 8, 9]
    assert torch.equal(out.k[0, 0, 3:], k[0, 0, [4, 5, 7]])
    with pytest.raises(ValueError, match="local_len"):
        ConvCompressor(head_dim=4, mem_size=6, hh_keep_rate=0.5, local_len=4)


def test_conv_init_reference_normal_or_soft_default():
    """conv_init_std=1.0 is the reference's N(0, 1); null keeps PyTorch's fan-in init (softer mixing)."""
    torch.manual_seed(0)
    ref = ConvCompressor(head_dim=32, mem_size=16, kernel_size=21)
    soft = ConvCompressor(head_dim=32, mem_size=16, kernel_size=21, conv_init_std=None)
    w_ref, w_soft = ref.layers[0].weight, soft.layers[0].weight
    assert abs(float(w_ref.std()) - 1.0) < 0.02
    assert float(w_soft.std()) < 0.05  # ≈ 1/sqrt(3·fan_in) for fan_in = 64·21
    # on the same cache the reference init gives near one-hot mixing weights, the soft init spread ones
    x = torch.randn(2, 64, 24)
    top_ref = torch.softmax(ref.layers(x), -1).amax(-1).mean()
    top_soft = torch.softmax(soft.layers(x), -1).amax(-1).mean()
    assert top_ref > 0.5 > top_soft


def test_lococo_auto_rope_factor_never_below_one():
    def factor(window: int) -> float:
        bundle = load_model(option_config("model", {"name": "tiny", "max_position_embeddings": window}))
        cfg = option_config("method", {"name": "lococo", "segment_len": 16, "mem_size": 32, "n_segments": 4,
                                "kernel_size": 5, "local_len": 0, "rope_scaling_factor": "auto"})
        return build("method", cfg, bundle=bundle).rope_factor()

    assert factor(32) == 2.0  # 64 training tokens over a 32-token window: interpolate by 2
    assert factor(64) == 1.0
    assert factor(4096) == 1.0  # a window over the training length is not stretched


def test_positional_interpolation_is_the_same_in_both_position_modes(tiny):
    """With nothing evicted, slot indices are text positions: both modes read RoPE at p / factor, and
    differ from the uninterpolated model (RoPE scaled once, not twice, on the cache path)."""
    ids = ids_of(64)

    def logits(**kw):
        outs = []
        with torch.no_grad():
            lococo(tiny, mem_size=200, **kw).runner().stream(KVState(), ids, 16, on_logits=lambda s, lg: outs.append(lg))
        return torch.cat(outs, 1)

    absolute = logits(positions="absolute", rope_scaling_factor=2.0)
    assert torch.allclose(logits(positions="cache", rope_scaling_factor=2.0), absolute, atol=1e-5, rtol=0)
    assert (logits(positions="cache") - absolute).abs().max() > 1e-3
