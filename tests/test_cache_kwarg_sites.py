"""ICAE, CCM and the kvpress adapter pass a KV cache under :func:`cache_kwarg`'s keyword, never a
hard-coded one (issue 36 item 5): with the keyword forced to the older ``past_key_values`` (which
transformers 5.25 still accepts, renamed), every model call they make that carries a cache carries
it under that name, and the cache they read back comes from :func:`returned_cache`.
"""
from __future__ import annotations

import pytest
import torch
from method_cases import build_case
from transformers import PreTrainedModel

import ctxbench.methods.ccm as ccm_mod
import ctxbench.methods.icae as icae_mod
from ctxbench.config.compose import option_config
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.models.loading import load_model

OLD = "past_key_values"
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")


class OuterCalls:
    """The keyword names of every outermost call into a model (calls transformers makes inside one
    are its own business)."""

    def __init__(self, model: torch.nn.Module):
        self.depth, self.keys = 0, []
        self.handles = []
        for m in model.modules():
            if isinstance(m, PreTrainedModel):
                self.handles.append(m.register_forward_pre_hook(self.pre, with_kwargs=True))
                self.handles.append(m.register_forward_hook(self.post, always_call=True))

    def pre(self, module, args, kwargs):
        if self.depth == 0:
            self.keys.append(set(kwargs))
        self.depth += 1

    def post(self, module, args, output):
        self.depth -= 1

    def close(self) -> list[set[str]]:
        for h in self.handles:
            h.remove()
        return self.keys


def check(keys: list[set[str]]) -> None:
    assert any(OLD in k for k in keys), keys  # the cache went in, under the forced name
    assert not any("cache" in k for k in keys), keys  # never under the hard-coded newer one


@pytest.fixture
def forced(monkeypatch):
    for mod in (icae_mod, ccm_mod):
        monkeypatch.setattr(mod, "cache_kwarg", lambda model: OLD, raising=False)


@torch.no_grad()
def test_icae_greedy_decoding_passes_its_cache_under_cache_kwarg(forced):
    m, _ = build_case("icae_pretrain", torch.float32)
    calls = OuterCalls(m.model)
    out = m.reconstruct_ids(list(range(10, 40)), 4)
    check(calls.close())
    assert len(out) <= 4


@torch.no_grad()
def test_ccm_compression_and_decoding_pass_their_cache_under_cache_kwarg(forced):
    m, _ = build_case("ccm_concat", torch.float32)
    m.eval()
    calls = OuterCalls(m.model)
    memory, _ = m.compress_step(ccm_mod.Memory(), list(range(10, 20)))
    memory, _ = m.compress_step(memory, list(range(20, 30)))
    m.generate(memory, list(range(30, 36)), 3)
    check(calls.close())
    assert memory.slots == 2 * m.n_tok


@torch.no_grad()
def test_kvpress_ingest_and_answer_pass_their_cache_under_cache_kwarg(monkeypatch):
    pytest.importorskip("kvpress")
    import ctxbench.methods.kvpress_adapter as kvp

    monkeypatch.setattr(kvp, "cache_kwarg", lambda model: OLD, raising=False)
    bundle = load_model(option_config("model", {"name": "tiny", "attn_implementation": "sdpa"}))
    m = build("method", option_config("method", {"name": "kvpress", "press": "knorm", "compression_ratio": 0.5,
                                                 "press_kwargs": {}, "max_new_tokens": 3}), bundle=bundle)
    hist = History(id="h", speakers=["Ann", "Bob"], sessions=[Session("1", [
        Turn("Ann", "I moved to Lisbon last spring.", "D1:1"), Turn("Bob", "I am in Berlin.", "D1:2")],
        date="1 May 2023")])
    calls = OuterCalls(bundle.model)
    m.ingest(hist)
    m.answer(Question(id="q", question="Where did Ann move?", answer="Lisbon"))
    check(calls.close())
