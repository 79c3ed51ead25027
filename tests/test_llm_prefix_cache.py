"""Shared-prefix KV reuse in ``llm=hf`` (ctxbench.llm.prefix_cache): replies equal to no reuse.

Two HFChatLLMs share one loaded model, one with ``prefix_cache`` on and one with it off; every
call is made on both and compared (generated token ids, text, token counts, truncation). The tiny
random model answers ~500-token prompts in milliseconds; at its default init (std 0.02) it emits
one token whatever the prompt, so its weights are redrawn with std 0.3 here: its replies then
differ from prompt to prompt and change when a cached position is wrong (a check that a reused
cache one token too long or short fails). The SmolLM2 test (slow) uses real LoCoMo history.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.llm.hf import HFChatLLM, llm_model_config
from ctxbench.llm.prefix_cache import PrefixCache, common_prefix
from ctxbench.models.loading import load_model
from ctxbench.config.compose import option_config

SYSTEM = "You answer questions about a conversation. Reply with a brief answer."
HISTORY = "\n".join(f"Alice: on day {i} I bought {3 * i} apples and a loaf of bread." for i in range(12))
QUESTIONS = ["How many apples on day 3?", "What did Alice buy?", "Which day had 30 apples?",
             "Did Alice buy bread on day 11?"]


def msgs(question: str, history: str = HISTORY, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Conversation:\n{history}\n\nQuestion: {question}\nAnswer:"}]


def pair(model: str, window: int, min_tokens: int, entries: int = 2, std: float | None = None):
    """(reusing, plain) backends over one loaded model, whose ``generate`` and greedy loop record their
    new token ids in ``on.generated`` (shared by both); ``std``: redraw the matrices' weights with it."""
    base = {"name": "hf", "model": model, "context_window": window, "batch_size": 2}
    bundle = load_model(*llm_model_config(option_config("llm", base)))
    if std is not None:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in bundle.model.parameters():
                if p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
    on = HFChatLLM(option_config("llm", {**base, "prefix_cache": True, "prefix_cache_min_tokens": min_tokens,
                                     "prefix_cache_entries": entries}), bundle=bundle)
    off = HFChatLLM(option_config("llm", {**base, "prefix_cache": False}), bundle=bundle)
    generate, generated = bundle.model.generate, []

    def recording(*args, **kw):
        out = generate(*args, **kw)
        generated.extend(out[:, kw["input_ids"].shape[1]:].tolist())
        return out
    bundle.model.generate = recording
    for llm in (on, off):  # greedy calls run llm/decode.py's loop, not generate: record theirs too
        def greedy(*args, _inner=llm._greedy, **kw):
            rows = _inner(*args, **kw)
            generated.extend(rows)
            return rows
        llm._greedy = greedy
    on.generated = off.generated = generated
    return on, off


@pytest.fixture
def tiny_pair():
    return pair("tiny", 2048, min_tokens=64, std=0.3)


def same(a, b) -> bool:
    return (a.text, a.prompt_tokens, a.completion_tokens, a.truncated) == \
        (b.text, b.prompt_tokens, b.completion_tokens, b.truncated)


def both(on, off, messages, **kw):
    """The same call on both backends; asserts equal replies and equal generated token ids."""
    a = on.chat(messages, **kw)
    b = off.chat(messages, **kw)
    assert same(a, b), (a, b)
    assert on.generated[-2] == on.generated[-1]
    return a


def test_shared_prefix_replies_equal_and_hits_count(tiny_pair):
    on, off = tiny_pair
    assert off.prefix_cache is None and off.prefix_hits == 0
    ids = [on.encode_chat(msgs(q)) for q in QUESTIONS]
    assert all(len(i) > 500 for i in ids)
    replies = [both(on, off, msgs(q), max_new_tokens=12) for q in QUESTIONS]
    assert len({tuple(g) for g in on.generated}) == len(QUESTIONS)  # the replies differ: the check has teeth
    assert all(r.completion_tokens >= 1 for r in replies)
    # the first call stores, each later one reuses the longest prefix it shares with a stored prompt
    expected = sum(min(max(common_prefix(ids[i], ids[j]) for j in range(max(0, i - 2), i)), len(ids[i]) - 1)
                   for i in range(1, len(ids)))
    assert on.prefix_hits == len(QUESTIONS) - 1 and on.prefix_cache.misses == 1
    assert on.prefix_tokens_reused == expected and expected > 3 * 500


def test_prompt_tokens_stay_the_full_prompt(tiny_pair):
    on, off = tiny_pair
    for q in QUESTIONS[:3]:
        r = both(on, off, msgs(q), max_new_tokens=4)
        assert r.prompt_tokens == len(on.encode_chat(msgs(q)))
    assert on.prefix_hits == 2
    assert on.meter.get("answer").prompt_tokens == off.meter.get("answer").prompt_tokens \
        == sum(len(on.encode_chat(msgs(q))) for q in QUESTIONS[:3])
    assert on.meter.get("answer").completion_tokens == off.meter.get("answer").completion_tokens


def test_an_early_divergence_is_a_miss(tiny_pair):
    on, off = tiny_pair
    on.chat(msgs(QUESTIONS[0]), max_new_tokens=4)
    other = msgs(QUESTIONS[0], system="Answer in French, in one word.")  # differs a few tokens in
    assert common_prefix(on.encode_chat(other), on.encode_chat(msgs(QUESTIONS[0]))) < 64
    both(on, off, other, max_new_tokens=6)
    assert on.prefix_hits == 0 and on.prefix_cache.misses == 2 and on.prefix_tokens_reused == 0


def test_the_stored_cache_is_never_mutated(tiny_pair):
    on, off = tiny_pair
    first, second = msgs(QUESTIONS[0]), msgs(QUESTIONS[1])
    on.chat(first, max_new_tokens=8)
    entry = on.prefix_cache._entries[tuple(on.encode_chat(first))]
    stored = [(layer.keys.clone(), layer.values.clone()) for layer in entry.layers]
    both(on, off, second, max_new_tokens=8)  # a hit on the first prompt's entry, through a copy
    assert on.prefix_hits == 1
    for layer, (k, v) in zip(entry.layers, stored):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)
        assert layer.keys.shape[-2] == len(on.encode_chat(first))  # the prompt only, no generated tokens
    # the same prompt twice after a different one: equal to no reuse both times
    a, b = both(on, off, first, max_new_tokens=8), both(on, off, first, max_new_tokens=8)
    assert same(a, b) and on.prefix_hits == 3


def test_structured_calls_reuse_with_equal_replies(tiny_pair):
    on, off = tiny_pair
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 12}},
              "required": ["answer"], "additionalProperties": False}
    for q in QUESTIONS[:3]:
        r = both(on, off, msgs(q), max_new_tokens=24, schema=schema)
        assert r.constrained and r.text.startswith('{"answer"')
    assert len({tuple(g) for g in on.generated}) == 3
    assert on.prefix_hits == 2


def test_seeded_sampling_reuses_with_equal_replies(tiny_pair):
    on, off = tiny_pair
    for q in QUESTIONS[:3]:
        both(on, off, msgs(q), max_new_tokens=10, temperature=1.0, seed=7)
    assert on.prefix_hits == 2


def test_a_batch_sharing_a_history_computes_it_once_and_reuses_it(tiny_pair):
    on, off = tiny_pair
    batch = [msgs(q) for q in QUESTIONS]
    rs, want = on.chat_batch(batch, max_new_tokens=5), off.chat_batch(batch, max_new_tokens=5)
    assert all(same(a, b) for a, b in zip(rs, want))  # the replies of the batched path, row by row
    assert on.prefix_hits == 3 and on.prefix_cache.misses == 1  # the first computes, three reuse


def test_unrelated_prompts_in_a_batch_keep_the_batched_path(tiny_pair):
    on, off = tiny_pair
    batch = [msgs(QUESTIONS[0]), msgs(QUESTIONS[1], history=HISTORY.replace("Alice", "Bob"), system="Be brief.")]
    rs, want = on.chat_batch(batch, max_new_tokens=5), off.chat_batch(batch, max_new_tokens=5)
    assert all(same(a, b) for a, b in zip(rs, want))
    assert on.prefix_hits == 0 and len(on.prefix_cache) == 0 and on.prefix_cache.misses == 0


def test_short_prompts_are_neither_reused_nor_stored(tiny_pair):
    on, _ = tiny_pair
    short = [{"role": "user", "content": "Where is Paris?"}]
    on.chat(short, max_new_tokens=3)
    on.chat(short, max_new_tokens=3)
    assert on.prefix_hits == 0 and len(on.prefix_cache) == 0


def test_prefix_cache_false_builds_none():
    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "prefix_cache": False}))
    assert llm.prefix_cache is None and (llm.prefix_hits, llm.prefix_tokens_reused) == (0, 0)
    default = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny"}), bundle=llm.bundle)
    assert (default.prefix_cache.min_tokens, default.prefix_cache.max_entries) == (256, 2)


# ---- PrefixCache on its own ---------------------------------------------------------------------

def fake_cache(n: int):
    """A one-layer DynamicCache of ``n`` positions whose keys are 0..n-1."""
    from transformers import DynamicCache

    c = DynamicCache()
    c.update(torch.arange(n, dtype=torch.float32).view(1, 1, n, 1), torch.zeros(1, 1, n, 1), 0)
    return c


def test_lookup_crops_a_copy_and_leaves_one_token():
    pc = PrefixCache(min_tokens=4, entries=2)
    a = list(range(10))
    assert pc.store(a, fake_cache(12))  # 10 prompt + 2 generated positions: cropped to the prompt
    assert pc._entries[tuple(a)].get_seq_length() == 10
    c, n = pc.lookup(a)  # the same prompt: all but its last token
    assert n == 9 and c.get_seq_length() == 9 and pc._entries[tuple(a)].get_seq_length() == 10
    c.layers[0].keys.add_(100)  # the copy is the caller's
    assert pc._entries[tuple(a)].layers[0].keys.flatten().tolist() == list(map(float, range(10)))
    c, n = pc.lookup(a[:6] + [99, 98, 97])
    assert n == 6 and c.layers[0].keys.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert pc.lookup(a[:3] + [50] * 8) == (None, 0)  # 3 < min_tokens
    assert (pc.hits, pc.misses, pc.tokens_reused) == (2, 1, 15)


def test_lookup_picks_the_longest_prefix_and_evicts_the_oldest():
    pc = PrefixCache(min_tokens=2, entries=2)
    a, b, c = [1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9, 9], [7, 7, 7, 7]
    pc.store(a, fake_cache(6))
    pc.store(b, fake_cache(6))
    assert pc.lookup([1, 2, 3, 4, 5, 0])[1] == 5  # a shares 5, b 3
    pc.store(c, fake_cache(4))  # evicts b (a was used more recently)
    assert set(pc._entries) == {tuple(a), tuple(c)}
    assert pc.lookup([1, 2, 3, 9, 9, 0])[1] == 3  # from a now
    assert not pc.store([5], fake_cache(1))  # shorter than min_tokens
    assert not pc.store([1, 2, 3], fake_cache(2))  # the cache does not hold the prompt


def test_bad_sizes_name_their_config_keys():
    with pytest.raises(ConfigError, match="llm.prefix_cache_min_tokens"):
        PrefixCache(min_tokens=0)
    with pytest.raises(ConfigError, match="llm.prefix_cache_entries"):
        PrefixCache(entries=0)


# ---- SmolLM2 on real LoCoMo history -------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_full_context_replies_equal(shared_data):
    """3 answer prompts (qa_prompt=brief) over the same ~1,500-token LoCoMo history: SmolLM2's
    greedy replies and token counts are equal with reuse on and off, and the 2nd and 3rd hit."""
    from ctxbench.qa import get_prompt
    from ctxbench.core.registry import build
    from ctxbench.core.render import render_history
    from ctxbench.core.types import History

    sample = list(build("dataset", option_config("dataset", {"name": "locomo", "path": str(shared_data / "locomo10.json")})))[0]
    on, off = pair("smollm2_135m", 2048, min_tokens=256)
    h = sample.history
    k = max(n for n in range(1, len(h.sessions) + 1)
            if on.count_tokens(render_history(History(h.id, h.sessions[:n], speakers=h.speakers))) <= 1600)
    context = render_history(History(h.id, h.sessions[:k], speakers=h.speakers))
    prompt = get_prompt("brief")
    questions = [q for q in sample.questions if q.category != 5][:3]
    replies = [both(on, off, prompt.messages(q, context, h.speakers), max_new_tokens=16) for q in questions]
    lengths = [len(on.encode_chat(prompt.messages(q, context, h.speakers))) for q in questions]
    assert min(lengths) > 1200 and [r.prompt_tokens for r in replies] == lengths
    assert on.prefix_hits == 2 and on.prefix_tokens_reused > 2 * 1200
    assert all(r.text for r in replies) and len({r.text for r in replies}) > 1


def test_the_measurement_reports_hits_and_equal_replies():
    """bench.prefix_reuse on the tiny model and the shipped LoCoMo sample (fast; the SmolLM2 run is
    the issue's measurement): every question after the first reuses the shared history."""
    from ctxbench.bench.prefix_reuse import measure_full_context_prefix
    from ctxbench.core.paths import samples_dir

    r = measure_full_context_prefix(questions=3, context_window=4096, max_new_tokens=4, model="tiny",
                                    path=samples_dir() / "locomo_sample.json", threads=1)
    assert r["prefix_hits"] == 2 and r["hit"] == [False, True, True]
    assert r["replies_equal"] and r["prompt_tokens_equal"] and r["prompt_tokens_mean"] > 1000
    assert r["tokens_reused_mean"] > 1000 and r["model"] == "tiny" and r["threads"] == 1
    assert r["ratio"] == pytest.approx(r["latency_on_s"] / r["latency_off_s"], rel=1e-2)
    assert r["latency_off_s"] == pytest.approx(sum(r["latencies_off_s"][1:]) / 2, abs=2e-3)
