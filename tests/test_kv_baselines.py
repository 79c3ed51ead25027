"""Fixed-cache baselines (StreamingLLM, H2O, full cache) on the tiny random Llama.

Shows: the cache never holds more than M slots between segments; with M ≥ the sequence each
method reproduces the full model's logits; the eviction rules keep exactly the tokens they name
on hand-made caches with hand-set attention scores; the QA system reports the KV it holds.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.methods.kv_baselines import H2OPress, SinkPress
from ctxbench.methods.kv_cache import KVState
from ctxbench.methods.press import LayerKV, SegmentInfo
from ctxbench.models.loading import load_model
from ctxbench.registry import build
from ctxbench.types import History, Question, Session, Turn


@pytest.fixture(scope="module")
def tiny():
    return load_model(OmegaConf.create({"name": "tiny"}))


def method(bundle, name: str, **kw):
    return build("method", OmegaConf.create({"name": name, "positions": "absolute", **kw}), bundle=bundle)


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 250, (1, n), generator=g)


def seg(score: torch.Tensor | None = None) -> SegmentInfo:
    return SegmentInfo(layer_idx=0, n_layers=1, seg_len=2, seg_score=score, phase="ingest")


def hand_cache(L: int, heads: int = 2, d: int = 4, score: torch.Tensor | None = None) -> LayerKV:
    """A cache whose slot i holds key/value i (so kept slots are readable from the values)."""
    pos = torch.arange(L).view(1, 1, L).expand(1, heads, L).clone()
    k = pos.unsqueeze(-1).float().expand(1, heads, L, d).clone()
    return LayerKV(k, k.clone() + 1000, pos, score if score is not None else torch.zeros(1, heads, L))


# ---- eviction rules on hand-made caches --------------------------------------------------------

def test_streamingllm_keeps_sinks_and_most_recent():
    kv = hand_cache(10)
    out = SinkPress(n_sink=2).compress(kv, seg(kv.score), 6)
    for h in range(2):
        assert out.pos[0, h].tolist() == [0, 1, 6, 7, 8, 9]
        assert out.k[0, h, :, 0].tolist() == [0, 1, 6, 7, 8, 9]
        assert out.v[0, h, :, 0].tolist() == [1000, 1001, 1006, 1007, 1008, 1009]


def test_h2o_keeps_heavy_hitters_by_score_plus_local_window():
    # head 0: heavy among slots 0..7 by score are 4 (9), 0 (5), 2 (3), 5 (1); slots 8, 9 are the window
    # head 1: a different ranking, and the window's own scores do not matter
    score = torch.tensor([[[5, 0, 3, 0, 9, 1, 0, 0, 0, 0],
                           [0, 8, 0, 7, 0, 0, 6, 5, 99, 99]]], dtype=torch.float32)
    kv = hand_cache(10, score=score)
    out = H2OPress(n_recent=2).compress(kv, seg(torch.zeros_like(score)), 6)
    assert out.pos[0, 0].tolist() == [0, 2, 4, 5, 8, 9]
    assert out.pos[0, 1].tolist() == [1, 3, 6, 7, 8, 9]
    assert out.k[0, 1, :, 0].tolist() == [1, 3, 6, 7, 8, 9]
    assert out.score[0, 0].tolist() == [5, 3, 9, 1, 0, 0]  # scores travel with their slots


def test_h2o_uses_accumulated_not_last_segment_scores():
    acc = torch.tensor([[[9, 1, 1, 1, 0, 0]]], dtype=torch.float32)
    last = torch.tensor([[[0, 1, 1, 9, 0, 0]]], dtype=torch.float32)
    kv = hand_cache(6, heads=1, score=acc)
    out = H2OPress(n_recent=2).compress(kv, seg(last), 3)
    assert out.pos[0, 0].tolist() == [0, 4, 5]


# ---- the press runner on the model's own attention and cache -------------------------------------------------------------------------

@pytest.mark.parametrize("name,kw", [("streamingllm", {"positions": "cache"}), ("streamingllm", {"positions": "absolute"}),
                                     ("h2o", {}), ("h2o", {"positions": "cache"}), ("full_cache", {})])
def test_large_cache_equals_full_model(tiny, name, kw):
    ids = ids_of(90)
    with torch.no_grad():
        ref = tiny.model(ids).logits
    m = method(tiny, name, segment_len=16, mem_size=90, **kw)
    outs = []
    state = m.runner().stream(KVState(), ids, 16, on_logits=lambda s, lg: outs.append(lg))
    got = torch.cat(outs, dim=1)
    assert got.shape == ref.shape
    assert torch.allclose(got, ref, atol=1e-5, rtol=0), (got - ref).abs().max()
    assert state.slots == 90


@pytest.mark.parametrize("name", ["streamingllm", "h2o"])
def test_cache_never_exceeds_mem_size(tiny, name):
    m = method(tiny, name, segment_len=16, mem_size=40)
    runner, state = m.runner(), KVState()
    ids = ids_of(150)
    sizes = []
    with torch.no_grad():
        for s in range(0, 150, 16):
            runner.forward(state, ids[:, s: s + 16])
            sizes.append(state.slots)
            assert all(l.k.shape[2] <= 40 and l.v.shape[2] <= 40 for l in state.layers)
    assert max(sizes) == 40 and sizes[0] == 16
    assert state.peak_slots == 40 + 16
    assert state.kv_bytes() == 2 * 2 * 2 * 40 * 16 * 4  # layers × (K,V) × kv heads × slots × head_dim × fp32


def test_streamingllm_keeps_first_and_last_tokens_in_the_model(tiny):
    m = method(tiny, "streamingllm", segment_len=16, mem_size=40, n_sink=4)
    with torch.no_grad():
        state = m.runner().stream(KVState(), ids_of(100), 16)
    for layer in state.layers:
        for h in range(layer.pos.shape[1]):
            assert layer.pos[0, h].tolist() == [0, 1, 2, 3] + list(range(64, 100))


def test_attention_scores_accumulate_over_segments(tiny):
    """Each query row sums to 1 per head: after N tokens with no eviction a KV head holds N × group."""
    m = method(tiny, "h2o", segment_len=16, mem_size=1000)
    with torch.no_grad():
        state = m.runner().stream(KVState(), ids_of(64), 16)
    groups = 4 // 2
    for layer in state.layers:
        assert torch.allclose(layer.score.sum(-1), torch.full((1, 2), 64.0 * groups), atol=1e-3)
        assert (layer.score[..., 0] > layer.score[..., -1]).all()  # the first token was seen by every query


def test_perplexity_reports_fixed_memory(tiny):
    ids = ids_of(200)[0]
    full = method(tiny, "full_cache", segment_len=32).perplexity(ids)
    sink = method(tiny, "streamingllm", segment_len=32, mem_size=64).perplexity(ids)
    assert full["n_tokens"] == sink["n_tokens"] == 199
    assert full["kv_slots"] == 200 and sink["kv_slots"] == 64
    assert sink["kv_bytes"] * 200 == full["kv_bytes"] * 64
    assert sink["peak_slots"] == 96
    # with a cache as large as the text, the fixed-cache method is the full model
    same = method(tiny, "streamingllm", segment_len=32, mem_size=256).perplexity(ids)
    assert abs(same["nll"] - full["nll"]) < 1e-5
    with torch.no_grad():
        ref = torch.nn.functional.cross_entropy(tiny.model(ids.view(1, -1)).logits[0, :-1], ids[1:])
    assert abs(full["nll"] - float(ref)) < 1e-5


def test_qa_system_streams_history_and_answers(tiny):
    turns = [Turn("Ann", f"I moved to city number {i} last year and like it.", f"D1:{i}") for i in range(12)]
    hist = History(id="h", sessions=[Session("1", turns, date="1 May 2023")], speakers=["Ann", "Bob"])
    m = method(tiny, "h2o", segment_len=32, mem_size=48, max_new_tokens=5)
    m.ingest(hist)
    p1 = m.answer(Question(id="q1", question="Where did Ann move?", answer="city"))
    p2 = m.answer(Question(id="q2", question="Where did Ann move?", answer="city"))
    assert p1.text == p2.text  # answering does not change the ingested cache
    u = p1.usage
    assert u.memory_items == 48 and u.context_tokens == 48
    assert u.kv_bytes == 2 * 2 * 2 * 48 * 16 * 4
    assert u.extra["history_tokens"] > 300 and u.answer_calls == 1 and u.answer_completion_tokens <= 5
    assert u.extra["peak_working_slots"] <= 48 + max(32, u.answer_prompt_tokens + 5)


def test_training_free_methods_refuse_to_train(tiny):
    with pytest.raises(ValueError, match="training-free"):
        method(tiny, "streamingllm", mem_size=8).train_examples([])


def test_through_the_evaluator_on_locomo(tiny, shared_data, tmp_path):
    """A LoCoMo conversation (first 2 sessions, 3 questions) streamed through the cache and scored."""
    import json
    from dataclasses import replace

    from ctxbench.data.locomo import load_locomo_file
    from ctxbench.evaluate import evaluate_samples
    from ctxbench.types import Sample

    conv = load_locomo_file(shared_data / "locomo10.json")[0]
    short = Sample(replace(conv.history, sessions=conv.history.sessions[:2]), conv.questions[:3])
    m = method(tiny, "streamingllm", segment_len=64, mem_size=96, max_new_tokens=4)
    m.ingest(short.history)
    assert m._state.n_seen > 500 and m._state.slots == 96  # the conversation overflowed M
    results = evaluate_samples(m, [short], tmp_path, metrics=["f1"])
    assert results is not None
    preds = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3
    assert all(p["usage"]["kv_bytes"] == 2 * 2 * 2 * 96 * 16 * 4 and p["usage"]["memory_items"] == 96 for p in preds)


@pytest.mark.slow
def test_smollm2_fixed_caches_stay_flat_and_close_to_full(shared_data):
    """Packaged SmolLM2: 1,024 tokens of Shakespeare, B=64, M=128 (about a minute on one core)."""
    bundle = load_model(OmegaConf.create({"name": "smollm2_135m", "dtype": "float32"}))
    text = (shared_data / "tinyshakespeare.txt").read_text()[-20000:]
    ids = bundle.tokenizer(text, add_special_tokens=False)["input_ids"][:1024]
    full = method(bundle, "full_cache", segment_len=64).perplexity(ids, marks=[512, 1024])
    per_slot = 30 * 2 * 3 * 64 * 4  # layers × (K,V) × kv heads × head_dim × fp32
    assert [a["kv_bytes"] for a in full["at"]] == [512 * per_slot, 1024 * per_slot]
    for name in ("streamingllm", "h2o", "lococo"):
        r = method(bundle, name, segment_len=64, mem_size=128).perplexity(ids, marks=[512, 1024])
        assert [a["kv_bytes"] for a in r["at"]] == [128 * per_slot] * 2
        assert r["ppl"] < 1.5 * full["ppl"], (name, r["ppl"], full["ppl"])


@pytest.mark.parametrize("name,kw", [("full_cache", {}), ("streamingllm", {"positions": "cache"}), ("h2o", {})])
def test_answer_with_a_large_cache_is_the_full_models_greedy_answer(tiny, name, kw):
    """``answer`` decodes with ``model.generate`` from the press's cache: with M ≥ the prompt it is
    token for token the full model's greedy continuation of the whole prompt."""
    turns = [Turn("Ann", f"I moved to city number {i} last year and like it.", f"D1:{i}") for i in range(6)]
    hist = History(id="h", sessions=[Session("1", turns, date="1 May 2023")], speakers=["Ann", "Bob"])
    q = Question(id="q1", question="Where did Ann move?", answer="city")
    m = method(tiny, name, segment_len=32, mem_size=4096, max_new_tokens=8, **kw)
    m.ingest(hist)
    got = m.answer(q)
    from ctxbench.render import render_history

    before, after = m._frame(q, hist.speakers)
    tok = tiny.tokenizer
    ids = tok(before + render_history(hist, "locomo"), add_special_tokens=False)["input_ids"]
    ids += tok(after, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        ref = tiny.model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    new = ref[0, len(ids):].tolist()
    if tok.eos_token_id in new:
        new = new[: new.index(tok.eos_token_id)]
    assert len(new) > 0
    assert got.text == tok.decode(new, skip_special_tokens=True).strip()
    assert got.usage.answer_completion_tokens == len(new)
