"""``method=lm`` on the eval-task protocol (core/task_protocol.py): the plain model reading its context as text.

Shows: score_continuation is the model's NLL of the target after context + prompt in one forward;
a context longer than the window is cut from its oldest tokens; plain_lm switches LoRA off.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.config.compose import option_config


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"}))


def lm(bundle, **kw):
    cfg = {"name": "lm", "seq_len": 64, "lora": {"enabled": True, "r": 2, "alpha": 4, "dropout": 0.0,
                                                 "target_modules": ["q_proj", "v_proj"]}, **kw}
    return build("method", option_config("method", cfg), bundle=bundle)


def nll(model, ids: list[int], n: int) -> float:
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0, -n - 1: -1]
    return float(torch.nn.functional.cross_entropy(logits, x[0, -n:], reduction="sum"))


def ids_of(n: int, seed: int) -> list[int]:
    return torch.randint(5, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_score_continuation_is_one_forward_over_context_prompt_target(tiny):
    m = lm(tiny)
    ctx, prompt, target = ids_of(60, 1), ids_of(5, 2), ids_of(12, 3)
    got = m.score_continuation([ctx[:25], ctx[25:]], target, prompt)
    assert abs(got.nll - nll(tiny.model, ctx + prompt + target, 12)) < 1e-4  # untrained LoRA: B = 0
    assert (got.tokens, got.context_tokens, got.memory_slots) == (12, 60, 60)
    assert got.kv_bytes == 60 * 2 * 2 * 2 * 16 * 4  # tokens × layers × (K,V) × kv heads × head_dim × fp32
    no_prompt = m.score_continuation([ctx], target)
    assert abs(no_prompt.nll - nll(tiny.model, ctx + target, 12)) < 1e-4


def test_a_context_over_the_window_keeps_its_newest_tokens(tiny):
    m = lm(tiny, max_context=40)
    ctx, prompt, target = ids_of(60, 4), ids_of(5, 5), ids_of(10, 6)
    got = m.score_continuation([ctx], target, prompt)
    assert got.memory_slots == 25 and got.context_tokens == 60
    assert abs(got.nll - nll(tiny.model, ctx[-25:] + prompt + target, 10)) < 1e-4
    with pytest.raises(ConfigError, match="max_context"):
        m.score_continuation([ctx], ids_of(40, 7), prompt)
    with pytest.raises(ValueError, match="nothing precedes"):
        m.score_continuation([], target)


def test_plain_lm_switches_lora_off(tiny):
    m = lm(tiny)
    x = torch.tensor([ids_of(30, 8)])
    with torch.no_grad():
        base = tiny.model(x).logits.clone() if not hasattr(tiny.model, "disable_adapter") else None
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.fill_(0.2)
        tuned = m.model(x).logits
        with m.plain_lm() as plain:
            off = plain(x).logits
        with m.model.disable_adapter():
            ref = m.model(x).logits
    assert not torch.allclose(tuned, ref, atol=1e-3)
    assert torch.equal(off, ref)
    if base is not None:
        assert torch.allclose(off, base, atol=1e-6)
    ctx, target = ids_of(20, 9), ids_of(5, 10)
    assert m.score_continuation([ctx], target).nll != pytest.approx(nll(ref_model(m), ctx + target, 5), abs=1e-4)


def ref_model(m):
    """The base model's forward (adapter off) as a callable with ``.logits``."""
    class Base:
        def __call__(self, x):
            with m.model.disable_adapter():
                return m.model(x)
    return Base()
