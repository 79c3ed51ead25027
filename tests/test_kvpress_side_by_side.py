"""ctxbench's presses beside NVIDIA kvpress 0.5.5's on identical input ids and budgets (docs/kvpress.md).

On a tiny random Llama, one prefill of the same ids is compressed to the same number of slots per
layer and KV head by ctxbench's press (its runner, the whole text as one segment: the protocol of
``task=compression``) and by kvpress's (through ``method=kvpress``'s adapter). kvpress returns only
the kept keys, so its kept positions are recovered by matching each kept key vector back to the
full cache's keys of the same layer and head (a prefill's keys do not depend on the press: each
layer is compressed after its attention). The test fails when the kept positions drift apart.

Found (docs/kvpress.md): StreamingLLM keeps identical positions; SnapKV keeps identical positions
with window and kernel matched (both pool the votes for the slots before the window only, and both
keep the window; kvpress averages the window's and the group's votes where ctxbench sums them, the
same ranking). The one named difference is the budget's rounding: kvpress keeps int((1 − r) × n),
``task=compression`` ceil((1 − r) × n), at most one slot more.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("kvpress", reason="kvpress 0.5.5 (make setup installs it)")

from transformers import DynamicCache  # noqa: E402

from ctxbench.config.compose import option_config  # noqa: E402
from ctxbench.core import registry  # noqa: E402
from ctxbench.core.task_protocol import ratio_budget  # noqa: E402
from ctxbench.core.types import History  # noqa: E402
from ctxbench.methods.kv_cache import KVState  # noqa: E402
from ctxbench.methods.kvpress_adapter import cache_slots  # noqa: E402

TEXT = " ".join(f"Item {i} of the list is the word {w}." for i, w in
                enumerate("apple river stone cloud lamp horse paper seven violet engine".split() * 2))
RATIO, WINDOW, KERNEL, N_SINK = 0.75, 8, 5, 4


@pytest.fixture(scope="module")
def tiny():
    from ctxbench.models.loading import load_model

    torch.manual_seed(0)
    return load_model(option_config("model", {"name": "tiny"}))


def kvpress_kept(tiny, press: str, kwargs: dict) -> tuple[list[int], list[torch.Tensor]]:
    """(the ids kvpress prefilled, per layer the kept positions [kv_heads, n_kept], sorted)."""
    m = registry.build("method", option_config("method", {"name": "kvpress", "press": press, "compression_ratio": RATIO,
                                                          "press_kwargs": kwargs, "max_new_tokens": 1}), bundle=tiny)
    m.eval()
    m.ingest(History("h", [], TEXT))
    ids = m.tokenizer(m._prefix + TEXT, add_special_tokens=False)["input_ids"]
    full = DynamicCache()
    with torch.no_grad():
        tiny.model.model(input_ids=torch.tensor([ids]), **{m._cache_kw: full}, use_cache=True)
    kept = []
    for pressed, whole in zip(m._cache.layers, full.layers):
        k, f = pressed.keys[0].float(), whole.keys[0].float()  # [h, n_kept, d], [h, n, d]
        dist = torch.cdist(k, f)  # each kept key against every key of its head
        assert float(dist.min(-1).values.max()) < 1e-2, "a kept key matches no key of the full cache"  # others: > 0.1
        kept.append(dist.argmin(-1).sort(-1).values)
    assert len(set(cache_slots(m._cache))) == 1
    return ids, kept


def ctxbench_kept(tiny, name: str, cfg: dict, ids: list[int], budget: int) -> list[torch.Tensor]:
    """Per layer ctxbench's kept positions [kv_heads, budget], sorted: one segment, compressed to ``budget``."""
    m = registry.build("method", option_config("method", {"name": name, **cfg}), bundle=tiny)
    m.eval()
    with torch.no_grad():
        state = m.runner(budget).stream(KVState(), torch.tensor([ids]), len(ids))
    return [layer.pos[0].sort(-1).values for layer in state.layers]


def agreement(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """Share of kept positions the two agree on, over every layer and KV head."""
    same = sum(len(set(x.tolist()) & set(y.tolist())) for la, lb in zip(a, b) for x, y in zip(la, lb))
    return same / sum(x.numel() for x in a)


def test_streamingllm_keeps_the_same_positions_as_kvpress(tiny):
    ids, theirs = kvpress_kept(tiny, "streamingllm", {"n_sink": N_SINK})
    n_kept = int(len(ids) * (1 - RATIO))
    assert theirs[0].shape[-1] == n_kept
    ours = ctxbench_kept(tiny, "streamingllm", {"n_sink": N_SINK, "mem_size": n_kept}, ids, n_kept)
    assert agreement(ours, theirs) == 1.0
    assert all(torch.equal(x, y) for x, y in zip(ours, theirs))


def test_snapkv_keeps_the_same_positions_as_kvpress_with_window_and_kernel_matched(tiny):
    ids, theirs = kvpress_kept(tiny, "snapkv", {"window_size": WINDOW, "kernel_size": KERNEL})
    n_kept = int(len(ids) * (1 - RATIO))
    ours = ctxbench_kept(tiny, "snapkv", {"window": WINDOW, "kernel": KERNEL, "mem_size": n_kept}, ids, n_kept)
    assert agreement(ours, theirs) == 1.0, f"SnapKV drifted from kvpress: {agreement(ours, theirs):.3f} agree"
    # the comparison sees a drift: without the pooling ctxbench's choice differs (measured 0.52 agree)
    unpooled = ctxbench_kept(tiny, "snapkv", {"window": WINDOW, "kernel": 1, "mem_size": n_kept}, ids, n_kept)
    assert agreement(unpooled, theirs) < 0.9
    # the window is kept by both, and the choice is not trivial: most of the prefix is dropped
    assert all(set(range(len(ids) - WINDOW, len(ids))) <= set(h.tolist()) for layer in ours for h in layer)


def test_the_budgets_differ_only_by_rounding():
    """kvpress keeps int((1 − r) × n); task=compression's budget is ceil((1 − r) × n)."""
    for n in range(50, 400):
        diff = ratio_budget(RATIO, n) - int(n * (1 - RATIO))
        assert diff in (0, 1) and (diff == 0) == (n * (1 - RATIO) == int(n * (1 - RATIO)))
