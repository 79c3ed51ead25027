"""Issue 41's faster ingestion keeps what every press keeps: the votes taken in blocks of query rows
against only the keys each block sees (:meth:`PressCall.scores`), ingestion without the LM head, and
LoCoCo's mixing with CPU denormals flushed give the same kept slots and the same cache as the
straightforward computation (one full attention map per layer, the scale after q·k, the LM head on
the last token, denormals as they come), on the tiny model, for every press, streamed in segments
and as one prefill (the kvpress protocol's)."""
from __future__ import annotations

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.core.registry import build
from ctxbench.methods import lococo as lococo_module
from ctxbench.methods import press_hooks
from ctxbench.methods.kv_cache import KVState
from ctxbench.methods.press_hooks import PressCall, rotate
from ctxbench.models.loading import load_model

PRESSES = {"streamingllm": {}, "h2o": {}, "snapkv": {"window": 8}, "pyramidkv": {"window": 8},
           "lococo": {"local_len": 8}}


def full_map_scores(self, module, kwargs, keys, window):
    """The votes as computed before issue 41: one [groups × queries × keys] map per layer, the
    future masked over the whole segment, the scale applied to the logits."""
    self.score_calls += 1
    with torch.no_grad():
        h = kwargs["hidden_states"]
        cos, sin = kwargs["position_embeddings"]
        b, T = h.shape[:2]
        d, groups = module.head_dim, module.num_key_value_groups
        start = 0 if window is None else max(0, T - int(window))
        q = self.queries.pop(module.layer_idx, None)
        q = (module.q_proj(h) if q is None else q)[:, start:].detach().view(b, T - start, -1, d)
        q = rotate(q.transpose(1, 2), cos[:, start:], sin[:, start:]).float()
        n_kv, L_all = keys.shape[1], keys.shape[-2]
        L = L_all - T
        qg = q.reshape(b, n_kv, groups, T - start, d)
        logits = torch.einsum("bkgtd,bksd->bkgts", qg, keys.float()) * module.scaling
        future = ~self.mask(T, 0, h.device)[start:]
        logits[..., L:].masked_fill_(future, float("-inf"))
        return logits.softmax(-1).sum(dim=(2, 3))


@pytest.fixture(scope="module")
def bundle():
    return load_model(option_config("model", {"name": "tiny"}))


def ingest(bundle, name: str, ids: torch.Tensor, B: int, M: int, logits_to_keep=None) -> KVState:
    cfg = option_config("method", {"name": name, "segment_len": B, "mem_size": M, **PRESSES[name]})
    method = build("method", cfg, bundle=bundle)
    method.eval()
    with torch.no_grad():
        return method.runner().stream(KVState(), ids, B, logits_to_keep=logits_to_keep)


@pytest.mark.parametrize("name", list(PRESSES))
@pytest.mark.parametrize("B, M", [(16, 40), (300, 150)])  # streamed in segments; one prefill (VOTE_ROWS blocks)
def test_ingest_keeps_the_slots_and_cache_of_the_straightforward_computation(bundle, name, B, M, monkeypatch):
    ids = torch.randint(5, 250, (1, 300), generator=torch.Generator().manual_seed(7))
    monkeypatch.setattr(press_hooks, "VOTE_ROWS", 64)  # several blocks in the one-prefill case
    fast = ingest(bundle, name, ids, B, M)
    with monkeypatch.context() as m:
        m.setattr(PressCall, "scores", full_map_scores)
        m.setattr(lococo_module, "denormals_flushed", lambda on, plain=lococo_module.denormals_flushed: plain(False))
        before = ingest(bundle, name, ids, B, M, logits_to_keep=1)  # the LM head on the last token, as before
    assert fast.n_seen == before.n_seen == 300 and len(fast.layers) == len(before.layers)
    for a, b in zip(fast.layers, before.layers):
        assert torch.equal(a.pos, b.pos)  # the same slots kept, per layer and KV head
        assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)  # the same cache
        if B <= 64:  # a streamed segment is one block of votes: the same map, bit for bit
            assert torch.equal(a.score, b.score)
        else:  # one prefill in blocks: the same votes to fp32 rounding (sums taken in another order)
            torch.testing.assert_close(a.score, b.score, rtol=1e-5, atol=1e-6)


def test_denormals_flushed_restores_the_flag():
    tiny = torch.tensor([1e-39])
    with lococo_module.denormals_flushed(True):
        assert float(tiny * 1.0) == 0.0
    assert float(tiny * 1.0) > 0.0  # off again after, as it was
    torch.set_flush_denormal(True)
    try:
        with lococo_module.denormals_flushed(True):
            pass
        assert float(tiny * 1.0) == 0.0  # a process that flushes keeps flushing
    finally:
        torch.set_flush_denormal(False)
