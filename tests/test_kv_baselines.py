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
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"}))


def method(bundle, name: str, **kw):
    return build("method", option_config("method", {"name": name, "positions": "absolute", **kw}), bundle=bundle)


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
    assert u.memory_items == 48 and u.held_kv_slots == u.held == 48
    assert u.kv_bytes == 2 * 2 * 2 * 48 * 16 * 4
    assert u.extra["history_tokens"] > 300 and u.answer_calls == 1 and u.answer_completion_tokens <= 5
    assert u.extra["peak_working_slots"] <= 48 + max(32, u.answer_prompt_tokens + 5)
    c = m.construction_usage()  # building the cache read the whole history, one forward per 32-token segment
    assert c.construction_prompt_tokens == c.memory_tokens == u.extra["history_tokens"]
    assert c.construction_calls == -(-c.construction_prompt_tokens // 32)


def test_training_free_methods_refuse_to_train(tiny):
    with pytest.raises(ValueError, match="training-free"):
        method(tiny, "streamingllm", mem_size=8).train_examples([])


def test_through_the_evaluator_on_locomo(tiny, shared_data, tmp_path):
    """A LoCoMo conversation (first 2 sessions, 3 questions) streamed through the cache and scored."""
    import json
    from dataclasses import replace

    from ctxbench.data.locomo import load_locomo_file
    from ctxbench.evaluation.evaluator import evaluate_samples
    from ctxbench.core.types import Sample

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
    bundle = load_model(option_config("model", {"name": "smollm2_135m", "dtype": "float32"}))
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
    from ctxbench.core.render import render_history

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


# ---- the eval-task protocol: score_continuation, plain_lm ----------------------------------------

ALL_PRESSES = [("full_cache", {}), ("streamingllm", {"positions": "cache"}), ("streamingllm", {}), ("h2o", {}),
               ("lococo", {"local_len": 0, "kernel_size": 5}), ("snapkv", {"window": 4}), ("pyramidkv", {"window": 4})]


def plain_nll(model, context: list[int], prompt: list[int], target: list[int]) -> float:
    """The plain model's summed NLL of ``target`` given context + prompt, in one forward."""
    ids = torch.tensor([context + prompt + target])
    with torch.no_grad():
        logits = model(ids).logits[0, -len(target) - 1: -1]
    return float(torch.nn.functional.cross_entropy(logits, ids[0, -len(target):], reduction="sum"))


@pytest.mark.parametrize("name,kw", ALL_PRESSES)
@pytest.mark.parametrize("prompt", [[], [7, 8, 9, 10, 11]])
def test_score_continuation_with_a_large_cache_is_the_plain_model(tiny, name, kw, prompt):
    ids = ids_of(120, seed=3)[0].tolist()
    chunks, target = [ids[:50], ids[50:100]], ids[100:]
    # PyramidKV's top layer keeps (M − window) / beta + window slots: M = 4096 leaves it 208 ≥ 100
    m = method(tiny, name, segment_len=16, mem_size=4096 if name == "pyramidkv" else 512, **kw)
    got = m.score_continuation(chunks, target, prompt)
    assert got.tokens == 20 and got.context_tokens == 100 and got.memory_slots == 100
    assert got.kv_bytes == 100 * 2 * 2 * 2 * 16 * 4  # slots × layers × (K,V) × kv heads × head_dim × fp32
    assert abs(got.nll - plain_nll(tiny.model, ids[:100], prompt, target)) < 1e-4
    with m.plain_lm() as lm:
        assert lm(torch.tensor([ids])).logits.shape == (1, 120, tiny.model.config.vocab_size)


@pytest.mark.parametrize("name,kw", [p for p in ALL_PRESSES if p[0] != "full_cache"])
@pytest.mark.parametrize("prompt", [[], [7, 8, 9, 10, 11]])
def test_score_continuation_reads_at_most_m_slots(tiny, name, kw, prompt):
    ids = ids_of(180, seed=4)[0].tolist()
    m = method(tiny, name, segment_len=16, mem_size=32, **kw)
    got = m.score_continuation([ids[:160]], ids[160:], prompt)
    assert got.memory_slots <= 32 and got.context_tokens == 160 and got.tokens == 20
    per_slot = 2 * 2 * 2 * 16 * 4
    if name != "pyramidkv":  # PyramidKV's layers hold different counts (their mean is M)
        assert got.memory_slots == 32 and got.kv_bytes == 32 * per_slot
    assert got.kv_bytes <= 2 * 32 * per_slot
    full = plain_nll(tiny.model, ids[:160], prompt, ids[160:])
    assert abs(got.nll - full) > 1e-3  # the evicted context changes the target's NLL


@pytest.mark.parametrize("name,kw", [("streamingllm", {"positions": "cache"}), ("h2o", {}),
                                     ("lococo", {"local_len": 0, "kernel_size": 5})])
def test_target_nll_is_what_the_streamed_text_gives_its_last_segment(tiny, name, kw):
    """With eviction and no prompt, a target of one segment scores as the last segment of the whole
    text streamed through the same cache (stream_perplexity)."""
    ids = ids_of(176, seed=5)[0].tolist()
    m = method(tiny, name, segment_len=16, mem_size=48, **kw)
    got = m.score_continuation([ids[:160]], ids[160:])
    ppl = m.perplexity(ids, marks=[160])
    before = ppl["at"][0]["nll"] * ppl["at"][0]["n_tokens"]
    assert abs(got.nll - (ppl["nll"] * ppl["n_tokens"] - before)) < 1e-4


def test_score_continuation_needs_something_before_the_target(tiny):
    m = method(tiny, "streamingllm", segment_len=16, mem_size=32)
    with pytest.raises(ValueError, match="target is empty"):
        m.score_continuation([[5, 6]], [])
    with pytest.raises(ValueError, match="nothing precedes"):
        m.score_continuation([], [5, 6])
    assert abs(m.score_continuation([], [9, 10], [7, 8]).nll - plain_nll(tiny.model, [], [7, 8], [9, 10])) < 1e-4


def test_plain_lm_is_the_base_model_under_lora_and_tuned_norms():
    """LoCoCo with LoRA and tuned embeddings/norms: plain_lm computes the untouched base model."""
    bundle = load_model(option_config("model", {"name": "tiny"}))
    x = ids_of(40, seed=6)
    with torch.no_grad():
        ref = bundle.model(x).logits.clone()
    m = build("method", option_config("method", {"name": "lococo", "segment_len": 16, "mem_size": 32, "kernel_size": 5,
                                          "local_len": 0, "positions": "absolute", "train_embed_norm": True,
                                          "lora": {"enabled": True, "r": 2, "alpha": 4, "dropout": 0.0,
                                                   "target_modules": ["q_proj", "v_proj"]}}), bundle=bundle)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n or "norm" in n:
                p.add_(0.3)
        tuned = m.lm(x).logits
        with m.plain_lm() as lm:
            plain = lm(x).logits
        again = m.lm(x).logits
    assert not torch.allclose(tuned, ref, atol=1e-3)
    assert torch.allclose(plain, ref, atol=1e-5)
    assert torch.equal(again, tuned)  # the tuned weights and the adapter are back after the with


# ---- positions: which rotary position the next segment's queries get after eviction ---------------

def query_positions(m, state: KVState, seg: torch.Tensor) -> list[torch.Tensor]:
    """The cos of the rotary embedding each attention layer applied to ``seg``'s queries (forward hooks
    see the kwargs after the press's pre-hook set them)."""
    seen: list[torch.Tensor] = []
    runner = m.runner()
    hooks = [a.register_forward_hook(lambda mod, args, kw, out: seen.append(kw["position_embeddings"][0]),
                                     with_kwargs=True) for a in runner.attn]
    try:
        with torch.no_grad():
            runner.forward(state, seg)
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("positions", ["cache", "absolute"])
def test_streamingllm_queries_after_eviction_get_cache_or_text_positions(tiny, positions):
    ids = ids_of(116, seed=7)
    m = method(tiny, "streamingllm", segment_len=16, mem_size=40, n_sink=4, positions=positions)
    assert load_conf_file("ctxbench/conf/method/streamingllm.yaml").positions == "cache"  # the default
    runner = m.runner()
    with torch.no_grad():
        state = runner.stream(KVState(), ids[:, :100], 16)
    assert state.slots == 40 and state.n_seen == 100  # 60 tokens evicted: 4 sinks + the last 36 are kept
    assert state.layers[0].pos[0, 0].tolist() == list(range(4)) + list(range(64, 100))
    seg = ids[:, 100:]
    expect = torch.arange(40, 56) if positions == "cache" else torch.arange(100, 116)
    cos, _ = runner.rope(torch.zeros(1, dtype=torch.float32), expect.view(1, -1))
    seen = query_positions(m, state, seg)
    assert len(seen) == 2
    for got in seen:
        assert torch.allclose(got, cos, atol=1e-6)


@pytest.mark.parametrize("positions", ["cache", "absolute"])
def test_streamingllm_after_eviction_is_the_model_on_the_kept_tokens_repositioned(positions):
    """On a one-layer model a token's KV depends on the token and its position only, so after eviction
    the next segment must read exactly what the plain model computes on the kept tokens + the segment
    at cache positions 0..M+B−1 (positions=cache) or at their text positions (absolute)."""
    bundle = load_model(option_config("model", {"name": "tiny", "num_layers": 1}))
    ids = ids_of(116, seed=8)
    m = method(bundle, "streamingllm", segment_len=16, mem_size=40, n_sink=4, positions=positions)
    runner = m.runner()
    with torch.no_grad():
        state = runner.stream(KVState(), ids[:, :100], 16)
        got = runner.forward(state, ids[:, 100:])
        kept = list(range(4)) + list(range(64, 100))
        x = torch.cat([ids[:, kept], ids[:, 100:]], dim=1)
        text_pos = torch.tensor([kept + list(range(100, 116))])
        at_cache = bundle.model(x).logits[:, 40:]
        at_text = bundle.model(x, position_ids=text_pos).logits[:, 40:]
    want, other = (at_cache, at_text) if positions == "cache" else (at_text, at_cache)
    assert torch.allclose(got, want, atol=1e-6, rtol=0), (got - want).abs().max()
    # the two modes are told apart (a random tiny model attends almost uniformly: 9e-4 measured)
    assert float((got - other).abs().max()) > 1e-4
