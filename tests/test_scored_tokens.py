"""Every method that scores perplexity scores the same target tokens of a text (issue 36, item 2).

Loops over the registry: each method offering ``score_continuation`` scores exactly the T target
tokens the ``full_context`` / ``no_context`` baselines score, with and without a prompt; each offering
the stream ``perplexity`` records, at a mark m that is not a multiple of ``segment_len``, the m − 1
tokens the base model scores over that prefix (``plain_stream``), with the NLL and the cache that a
text of m tokens gives. The context (50 tokens) is not a multiple of any segment or step length.
"""
from __future__ import annotations

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.task_protocol import start_ids
from ctxbench.evaluation.tasks.common import baseline_nll
from ctxbench.evaluation.tasks.perplexity import plain_stream
from ctxbench.models.loading import load_model

SEG = 16
SMALL = {"icae_pretrain": {"mem_size": 4, "compression_rate": 4},
         "icae_finetune": {"mem_size": 4, "compression_rate": 4},
         "ccm_concat": {"n_tok": 2, "step_tokens": SEG}, "ccm_merge": {"n_tok": 2, "step_tokens": SEG},
         "lococo": {"segment_len": SEG, "mem_size": 24, "local_len": 4, "kernel_size": 5},
         "h2o": {"segment_len": SEG, "mem_size": 24}, "streamingllm": {"segment_len": SEG, "mem_size": 24},
         "snapkv": {"segment_len": SEG, "mem_size": 24, "window": 4, "kernel": 3},
         "pyramidkv": {"segment_len": SEG, "mem_size": 24, "window": 4, "kernel": 3},
         "full_cache": {"segment_len": SEG}}


def scorers(attr: str) -> list[str]:
    registry.discover()
    return [n for n in registry.names("method") if hasattr(registry.get("method", n), attr)]


def build(name: str):
    bundle = load_model(option_config("model", {"name": "tiny"}))
    over = {"positions": "absolute"} if "segment_len" in SMALL.get(name, {}) else {}
    m = registry.build("method", option_config("method", {"name": name, **SMALL.get(name, {}), **over}), bundle=bundle)
    m.eval()
    return m


def ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(5, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_the_loops_cover_the_compression_methods():
    assert {"lm", "icae_pretrain", "icae_finetune", "ccm_concat", "ccm_merge", "lococo", "h2o", "streamingllm",
            "snapkv", "pyramidkv", "full_cache"} <= set(scorers("score_continuation"))
    assert {"lococo", "h2o", "streamingllm", "snapkv", "pyramidkv", "full_cache"} <= set(scorers("perplexity"))


@pytest.mark.parametrize("name", scorers("score_continuation"))
def test_every_method_scores_the_baselines_target_tokens(name):
    m = build(name)
    context, target = [ids(50)], ids(7, 1)
    with torch.no_grad(), m.plain_lm() as lm:
        start = start_ids(m.tokenizer)
        for prompt in ([], ids(5, 2)):
            counts = {kind: baseline_nll(lm, kind, context, prompt, target, start)[1]
                      for kind in ("full_context", "no_context")}
            assert counts == {"full_context": 7, "no_context": 7}
    for prompt in ([], ids(5, 2)):
        with torch.no_grad():
            s = m.score_continuation(context, target, prompt)
        assert s.tokens == len(target), (name, prompt)
        assert s.nll == s.nll and s.nll > 0  # every scored token adds a finite, positive NLL


@pytest.mark.parametrize("name", scorers("perplexity"))
def test_stream_marks_score_the_prefix_a_shorter_text_is(name):
    m = build(name)
    text = ids(50)
    marks = [20, 32, 50]  # 20 and 50 inside a segment of 16, 32 at a segment's end
    with torch.no_grad():
        at = m.perplexity(text, marks=marks)["at"]
        with m.plain_lm() as lm:
            base = plain_stream(lm, text, marks)
    assert [a["tokens_in"] for a in at] == [b["tokens_in"] for b in base] == marks
    assert [a["n_tokens"] for a in at] == [b["n_tokens"] for b in base] == [19, 31, 49]
    for mark, a in zip(marks, at):
        with torch.no_grad():
            alone = m.perplexity(text[:mark])  # the text cut at the mark, streamed on its own
        assert a["nll"] == pytest.approx(alone["nll"], rel=1e-5, abs=1e-6)
        assert (a["kv_slots"], a["kv_bytes"]) == (alone["kv_slots"], alone["kv_bytes"])
    if name == "full_cache":  # no eviction: the base model's own numbers
        for a, b in zip(at, base):
            assert a["nll"] == pytest.approx(b["nll"], rel=1e-5) and a["kv_slots"] == b["kv_slots"]


def test_a_mark_inside_a_segment_leaves_the_stream_unchanged():
    """The extra run for a mark's cache does not touch the stream: the end is as without marks."""
    m = build("h2o")
    with torch.no_grad():
        plain, marked = m.perplexity(ids(50)), m.perplexity(ids(50), marks=[20, 37])
    assert marked["nll"] == plain["nll"] and marked["kv_slots"] == plain["kv_slots"]
