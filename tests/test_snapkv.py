"""SnapKV and PyramidKV presses on the tiny random Llama.

Shows: the window's votes, pooled, choose the slots (hand-made cache); the cache never exceeds M
(PyramidKV: its per-layer budgets, which shrink with depth and average M); with M ≥ the length both
equal the full model; when the question arrives the cache is cut to the M history slots the
question's window votes for, exactly the slots SnapKV picks from the full model's own attention
weights over the whole prompt; answering does not change the ingested cache.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.methods.kv_cache import KVState
from ctxbench.methods.press import LayerKV, SegmentInfo
from ctxbench.methods.pyramidkv import pyramid_budget
from ctxbench.methods.snapkv import SnapKVPress, pooled_votes
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.config.compose import option_config


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"}))


def method(bundle, name: str, **kw):
    return build("method", option_config("method", {"name": name, "positions": "absolute", "window": 4, "kernel": 3, **kw}),
                 bundle=bundle)


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 250, (1, n), generator=torch.Generator().manual_seed(seed))


def hand_cache(L: int) -> LayerKV:
    pos = torch.arange(L).view(1, 1, L)
    k = pos.unsqueeze(-1).float().expand(1, 1, L, 2).clone()
    return LayerKV(k, k + 100, pos.clone(), torch.zeros(1, 1, L))


def test_window_votes_pooled_choose_the_slots():
    votes = torch.tensor([[[0, 0, 9, 0, 0, 0, 0, 5, 6, 4, 0, 0]]], dtype=torch.float32)
    kv = hand_cache(12)
    raw = SnapKVPress(window=2, kernel=1).compress(kv, SegmentInfo(0, 1, 4, votes, "ingest"), 5)
    assert raw.pos[0, 0].tolist() == [2, 7, 8, 10, 11]  # top-3 by raw votes (2, 8, 7) + the window
    pooled = SnapKVPress(window=2, kernel=3).compress(kv, SegmentInfo(0, 1, 4, votes, "ingest"), 5)
    # pooled over 3 neighbours: 8 (mean 5), 7 (3.67), 9 (3.33) beat 2 (3): the run wins over the lone 9
    assert pooled_votes(votes, 3)[0, 0, 8] == pytest.approx(5.0)
    assert pooled.pos[0, 0].tolist() == [7, 8, 9, 10, 11]
    # for the question the whole question (the last seg_len slots) is kept beside the budget's history
    q = SnapKVPress(window=2, kernel=1).compress(kv, SegmentInfo(0, 1, 4, votes, "question"), 6)
    assert q.pos[0, 0].tolist() == [2, 7, 8, 9, 10, 11]


def test_pyramid_budgets_shrink_with_depth_and_average_m():
    b = [pyramid_budget(i, 30, 128, 16, 20) for i in range(30)]
    assert b == sorted(b, reverse=True) and b[0] == 16 + 2 * 112 - 5 and b[-1] == 16 + 5
    assert sum(b) == 30 * 128
    assert pyramid_budget(0, 1, 128, 16, 20) == 128


@pytest.mark.parametrize("name", ["snapkv", "pyramidkv"])
def test_large_cache_equals_full_model(tiny, name):
    ids = ids_of(90)
    with torch.no_grad():
        ref = tiny.model(ids).logits
    m = method(tiny, name, segment_len=16, mem_size=4000)  # pyramidkv: its top layer keeps (M − 4) / 20 + 4 ≥ 90
    outs = []
    with torch.no_grad():
        m.runner().stream(KVState(), ids, 16, on_logits=lambda s, lg: outs.append(lg))
    assert torch.allclose(torch.cat(outs, 1), ref, atol=1e-5, rtol=0)


def test_snapkv_cache_never_exceeds_m(tiny):
    m = method(tiny, "snapkv", segment_len=16, mem_size=24)
    runner, state = m.runner(), KVState()
    ids = ids_of(120)
    with torch.no_grad():
        for s in range(0, 120, 16):
            runner.forward(state, ids[:, s: s + 16])
            assert all(layer.slots <= 24 for layer in state.layers)
    assert state.slots == 24
    for layer in state.layers:  # the last segment's window (its last 4 tokens) is always kept
        assert (layer.pos[..., -4:] == torch.arange(116, 120)).all()


def test_pyramidkv_keeps_each_layer_at_its_budget(tiny):
    m = method(tiny, "pyramidkv", segment_len=16, mem_size=24)
    with torch.no_grad():
        state = m.runner().stream(KVState(), ids_of(120), 16)
    budgets = [pyramid_budget(i, 2, 24, 4, 20) for i in range(2)]
    assert budgets[0] > 24 > budgets[1]
    assert [layer.slots for layer in state.layers] == budgets
    uniform = method(tiny, "snapkv", segment_len=16, mem_size=24)
    with torch.no_grad():
        flat = uniform.runner().stream(KVState(), ids_of(120), 16)
    assert state.kv_bytes() == flat.kv_bytes()  # the same KV bytes as a uniform M
    # the layers' different lengths get their own masks (and, with positions=cache, their own slot
    # positions): the continuation runs, and with a cache as long as the text it is the full model
    ids = ids_of(120)[0]
    with torch.no_grad():
        ref = float(torch.nn.functional.cross_entropy(tiny.model(ids.view(1, -1)).logits[0, :-1], ids[1:]))
    for positions in ("absolute", "cache"):
        ppl = method(tiny, "pyramidkv", segment_len=16, mem_size=24, positions=positions).perplexity(ids)
        assert ppl["kv_slots"] == 24 and abs(ppl["nll"] - ref) > 1e-4
        same = method(tiny, "pyramidkv", segment_len=16, mem_size=4000, positions=positions).perplexity(ids)
        assert abs(same["nll"] - ref) < 1e-5
    with torch.no_grad():
        st = method(tiny, "pyramidkv", segment_len=16, mem_size=24, positions="cache").runner().stream(
            KVState(), ids.view(1, -1), 16)
    assert [layer.slots for layer in st.layers] == budgets


@pytest.fixture(scope="module")
def tiny_mha():
    """The tiny Llama with one KV head per query head: SnapKV's reference chooses per attention head."""
    return load_model(option_config("model", {"name": "tiny", "num_kv_heads": 4}))


def snapkv_reference_slots(model, prompt: torch.Tensor, n_hist: int, window: int, kernel: int, keep: int):
    """The slots SnapKV's reference code (FasterDecoding/SnapKV ``snapkv_utils.py``, ``update_kv``) keeps
    of a prompt, from the model's own attention weights (eager, output_attentions), per layer and head:
    the window's attention to the prefix only (``attn[..., -window:, :-window]``) summed over the
    window, ``avg_pool1d(kernel, padding=kernel // 2, stride=1)`` over that prefix, ``topk``. The top
    ``keep`` are taken among the first ``n_hist`` prefix slots (ctxbench keeps the whole question
    beside them; with the window at the end of the history, n_hist is the whole prefix)."""
    impl = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(prompt, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(impl)
    assert model.config.num_key_value_heads == model.config.num_attention_heads
    out = []
    for a in att:  # [1, heads, T, T]
        votes = a[:, :, -window:, :-window].sum(dim=-2)  # [1, heads, T - window]
        pooled = torch.nn.functional.avg_pool1d(votes, kernel_size=kernel, padding=kernel // 2, stride=1)
        out.append(pooled[..., :n_hist].topk(keep, dim=-1).indices.sort(-1).values)
    return out


def test_window_votes_for_itself_do_not_spill_into_the_prefix():
    """The window's own (large) votes are not pooled into the slots before it (reference: ``[:-w]``)."""
    votes = torch.tensor([[[0, 0, 6, 9, 3, 0, 0, 0, 0, 0, 60, 60]]], dtype=torch.float32)
    kv = hand_cache(12)
    out = SnapKVPress(window=2, kernel=3).compress(kv, SegmentInfo(0, 1, 4, votes, "ingest"), 4)
    # pooled prefix: 3 (6), 2 (5), 4 (4); slot 9 has 0 of its own (pooled with the window it had 20)
    assert out.pos[0, 0].tolist() == [2, 3, 10, 11]


def test_ingest_keeps_the_slots_snapkv_keeps_of_a_prompt(tiny_mha):
    """A prompt as one segment over an M-slot cache is SnapKV's prefill: the window + the M − window
    prefix slots the reference picks (this text: the old pooling over the window too picked others)."""
    ids = ids_of(40)
    for kernel in (5, 7):
        m = method(tiny_mha, "snapkv", segment_len=40, mem_size=16, kernel=kernel)
        with torch.no_grad():
            state = m.runner().stream(KVState(), ids, 40)
        ref = snapkv_reference_slots(tiny_mha.model, ids, 36, window=4, kernel=kernel, keep=12)
        for layer, want in zip(state.layers, ref):
            assert torch.equal(layer.pos[..., :12], want)
            assert (layer.pos[..., 12:] == torch.arange(36, 40)).all()


def test_question_cuts_the_cache_to_the_slots_its_window_votes_for(tiny_mha):
    """With ingest_size ≥ the history nothing is dropped at ingest; when the question arrives the
    cache keeps exactly the M history slots SnapKV's reference picks from the full prompt's attention
    (a question of window + 1 tokens: the window is the question read before the answer's first
    token, so the reference's prefix is the history itself)."""
    ids = ids_of(100)
    m = method(tiny_mha, "snapkv", segment_len=16, mem_size=20, ingest_size=200, kernel=5)
    with torch.no_grad():
        state = m.ingest_runner().stream(KVState(), ids, 16)
    assert state.slots == 100
    for n_q in (12, 5):
        q = ids_of(n_q, seed=3)[0].tolist()
        new, read = m.runner().generate(state, q, 0, [], None)
        assert state.slots == 100  # the ingested state is untouched
        # M history slots + the question (but its last token)
        assert [layer.slots for layer in read.layers] == [20 + n_q - 1] * 2
        prompt = torch.cat([ids, torch.tensor([q[:-1]])], dim=1)
        ref = snapkv_reference_slots(tiny_mha.model, prompt, 100, window=4, kernel=5, keep=20)
        for layer, want in zip(read.layers, ref):
            assert torch.equal(layer.pos[..., :20], want)
            assert (layer.pos[..., 20:] == torch.arange(100, 100 + n_q - 1)).all()
    # another question keeps other slots: the choice is the question's
    other = m.runner().generate(state, ids_of(12, seed=9)[0].tolist(), 0, [], None)[1]
    assert any(not torch.equal(a.pos, b.pos) for a, b in zip(read.layers, other.layers))


def test_qa_system_answers_from_m_slots(tiny):
    turns = [Turn("Ann", f"I moved to city number {i} last year and like it.", f"D1:{i}") for i in range(12)]
    hist = History(id="h", sessions=[Session("1", turns, date="1 May 2023")], speakers=["Ann", "Bob"])
    for name, kw in [("snapkv", {}), ("snapkv", {"ingest_size": 96}), ("pyramidkv", {})]:
        m = method(tiny, name, segment_len=32, mem_size=48, max_new_tokens=5, **kw)
        m.ingest(hist)
        p1 = m.answer(Question(id="q1", question="Where did Ann move?", answer="city"))
        p2 = m.answer(Question(id="q2", question="Where did Ann move?", answer="city"))
        assert p1.text == p2.text
        held = kw.get("ingest_size", 48)
        assert p1.usage.memory_items == held and p1.usage.held_kv_slots == 48
        assert p1.usage.kv_bytes == 2 * 2 * 2 * held * 16 * 4


def test_bad_settings_are_named(tiny):
    with pytest.raises(ValueError, match="method.kernel"):
        method(tiny, "snapkv", mem_size=24, kernel=4).runner()
    with pytest.raises(ValueError, match="method.window"):
        method(tiny, "snapkv", mem_size=4, window=4).runner()
