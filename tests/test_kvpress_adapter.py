"""method=kvpress: NVIDIA kvpress's prefill presses on transformers 5 (ctxbench/methods/kvpress_adapter.py).

Needs the optional kvpress package (`make setup` installs it); every test but the install message
is skipped without it.
"""
from __future__ import annotations

import sys

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.methods.kv_prompt import qa_frame, stop_token_ids
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.core.render import render_history
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.config.compose import option_config


@pytest.fixture(scope="module")
def kvpress():
    return pytest.importorskip("kvpress")


@pytest.fixture(scope="module")
def smol(kvpress):
    return load_model(option_config("model", {"name": "smollm2_135m", "dtype": "float32"}))


@pytest.fixture(scope="module")
def tiny(kvpress):
    return load_model(option_config("model", {"name": "tiny", "attn_implementation": "sdpa"}))  # not eager


HIST = History(id="h", speakers=["Ann", "Bob"], sessions=[Session("1", [
    Turn("Ann", "I moved to Lisbon last spring and I love the tiles.", "D1:1"),
    Turn("Bob", "Nice! I am still in Berlin, learning to paint.", "D1:2"),
    Turn("Ann", "My sister Clara visits me every August.", "D1:3"),
    Turn("Bob", "I adopted a grey cat called Pixel last week.", "D1:4"),
] * 3, date="1 May 2023")])
Q = Question(id="q1", question="Where did Ann move?", answer="Lisbon")


def method(bundle, **kw):
    return build("method", option_config("method", {"name": "kvpress", "press": "knorm", "compression_ratio": 0.5,
                                             "press_kwargs": {}, "max_new_tokens": 12, **kw}), bundle=bundle)


def full_greedy(bundle, m) -> str:
    """The uncompressed model's greedy answer to the same prompt, by generate over the whole text."""
    tok = bundle.tokenizer
    before, after = qa_frame(tok, m.answer_prompt, Q, HIST.speakers)
    ids = tok(before + render_history(HIST, "locomo"), add_special_tokens=False)["input_ids"]
    ids += tok(after, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = bundle.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False,
                                    eos_token_id=stop_token_ids(tok), pad_token_id=tok.pad_token_id)
    return tok.decode(out[0, len(ids):], skip_special_tokens=True).strip()


def test_missing_package_names_the_install_command(monkeypatch):
    from ctxbench.methods import kvpress_adapter

    monkeypatch.setitem(sys.modules, "kvpress", None)  # import kvpress → ModuleNotFoundError
    with pytest.raises(ConfigError, match=r"pip install --no-deps kvpress==0\.5\.5 .*cachetools.*fire.*termcolor"):
        kvpress_adapter.make_press(option_config("method", {"name": "kvpress", "press": "knorm"}))


@pytest.mark.parametrize("press", ["knorm", pytest.param("streamingllm", marks=pytest.mark.slow),
                                   pytest.param("SnapKVPress", marks=pytest.mark.slow)])  # slow: ~10 s each
def test_ratio_zero_is_the_full_model(smol, press):
    m = method(smol, press=press, compression_ratio=0.0,
               press_kwargs={"window_size": 8} if press == "SnapKVPress" else {})
    m.ingest(HIST)
    p = m.answer(Q)
    assert p.usage.memory_items == p.usage.memory_tokens  # nothing evicted
    ref = full_greedy(smol, m)
    assert ref and p.text == ref


def test_ratio_half_halves_the_cache_and_answering_leaves_it(smol):
    m = method(smol, press="streamingllm", compression_ratio=0.5)
    m.ingest(HIST)
    p1, p2 = m.answer(Q), m.answer(Q)
    n = p1.usage.memory_tokens
    assert p1.usage.extra["kv_slots_per_layer"] == [int(n * 0.5)] * 30
    assert p1.text == p2.text and p2.usage.memory_items == int(n * 0.5)
    c = m.construction_usage()  # one prefill of the whole history built the cache
    assert (c.construction_prompt_tokens, c.construction_calls) == (n, 1)
    cfg = smol.model.config
    assert p1.usage.kv_bytes == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * int(n * 0.5) * cfg.head_dim * 4


def test_question_continues_at_the_texts_true_positions(smol):
    m = method(smol, press="knorm", compression_ratio=0.5)
    m.ingest(HIST)
    seen = []
    h = smol.model.model.register_forward_pre_hook(lambda mod, a, kw: seen.append(kw["position_ids"]), with_kwargs=True)
    try:
        p = m.answer(Q)
    finally:
        h.remove()
    n = p.usage.memory_tokens
    assert p.usage.memory_items == int(n * 0.5) < n
    assert seen[0][0, 0].item() == n  # not the compressed length
    assert seen[0].shape[1] == p.usage.answer_prompt_tokens


def test_the_bridge_is_on_this_press_only(kvpress, tiny):
    """kvpress itself stays as shipped: a press not built by the method still fails on transformers 5."""
    from transformers import DynamicCache

    orig = kvpress.BasePress.forward_hook
    m = method(tiny, press="knorm")
    assert kvpress.BasePress.forward_hook is orig and "forward_hook" in vars(m.press)
    plain = kvpress.KnormPress(compression_ratio=0.5)
    with pytest.raises(KeyError, match="past_key_values"), plain(tiny.model), torch.no_grad():
        tiny.model.model(input_ids=torch.tensor([[5, 6, 7, 8]]), cache=DynamicCache(), use_cache=True)


@pytest.mark.parametrize("press", ["DecodingPress", "PrefillDecodingPress", "DMSPress",
                                   "CompressionRatioDecodingPress", "CAMPress"])
def test_decoding_presses_are_refused(tiny, press):
    with pytest.raises(ConfigError, match=r"method\.press=.*decoding-time press"):
        method(tiny, press=press)


@pytest.mark.parametrize("press", ["PyramidKVPress", "PerLayerCompressionPress"])
def test_per_layer_presses_are_refused(tiny, press):
    with pytest.raises(ConfigError, match=r"method\.press=.*method=pyramidkv"):
        method(tiny, press=press)


def test_observed_attention_needs_eager(tiny):
    with pytest.raises(ConfigError, match="model.attn_implementation=eager"):
        method(tiny, press="observed_attention")


def test_unknown_press_names_the_key(tiny):
    with pytest.raises(ConfigError, match="method.press"):
        method(tiny, press="nosuchpress")


def test_training_free(tiny):
    with pytest.raises(ConfigError, match="training-free"):
        method(tiny).train_examples([])


def test_ccm_attention_survives_kvpress_wrapping_every_attention_function(kvpress):
    """``import kvpress`` wraps every registered attention function and calls it with ``dropout`` as
    a 6th positional argument; CCM's function (registered before the import, in the same process)
    must take it. Before the fix: TypeError ``ccm_attention() takes 5 positional arguments``."""
    import types

    import torch

    from ctxbench.methods.ccm_mask import _make_attention
    from kvpress.attention_patch import attention_patch

    module = types.SimpleNamespace(num_key_value_groups=1, training=False, ccm_state=None, is_causal=False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=g) for _ in range(3))
    for base in ("eager", "sdpa"):
        plain = _make_attention(base)
        ref, _ = plain(module, q, k, v, None, dropout=0.0, scaling=0.5)
        got, _ = attention_patch(plain)(module, q, k, v, None, dropout=0.0, scaling=0.5)
        assert torch.allclose(got, ref, atol=1e-6), base
