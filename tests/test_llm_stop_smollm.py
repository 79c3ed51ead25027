"""Batched answering on the packaged SmolLM2 (slow): the same replies as one by one, on real answer prompts.

``qa_prompt=brief`` prompts for sample LoCoMo questions, with no context and with a few turns of the
conversation (prompts of different lengths, left-padded), generated as one batch by llm/decode.py's
loop with brief's ``stop=["\\n"]`` (rows leave the batch as they stop): every row's tokens are the
first tokens of the reply it gets alone without the stop, and every post-processed answer is the one
the whole reply gives.
"""
from __future__ import annotations

import pytest

from ctxbench.config.compose import option_config
from ctxbench.config.schemas import load_option
from ctxbench.core.registry import build
from ctxbench.llm.hf import HFChatLLM
from ctxbench.qa import get_prompt

pytestmark = pytest.mark.slow


def test_smollm_batch_with_stop_answers_as_one_by_one():
    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "smollm2_135m", "context_window": 1024,
                                          "batch_size": 8, "cache": False, "prefix_cache": False}))
    prompt = get_prompt("brief")
    sample = next(s for s in build("dataset", load_option("dataset", "locomo_sample")) if s.questions)
    context = "\n".join(f"{t.speaker}: {t.text}" for t in sample.history.sessions[0].turns[:4])
    qs = sample.questions[6:9]  # long replies; the last one, with context, writes a second line
    batch = [prompt.messages(q, "") for q in qs] + [prompt.messages(q, context) for q in qs]
    seqs = [llm.encode_chat(m) for m in batch]
    assert len({len(s) for s in seqs}) > 3
    cap = prompt.cap()
    alone = [llm._greedy([s], cap, [])[0] for s in seqs]  # one by one, no stop: to the cap or the stop token
    together = llm._greedy(seqs, cap, list(prompt.stop))
    cut = llm.chat_batch(batch, max_new_tokens=cap, **prompt.call_kwargs())
    for q, a, t, c in zip(qs + qs, alone, together, cut):
        assert t == a[:len(t)]
        whole = llm.tokenizer.decode([x for x in a if x not in llm.eos_ids], skip_special_tokens=True)
        assert prompt.postprocess(q, c.text) == prompt.postprocess(q, whole), (whole, c.text)
    assert any(c.stopped for c in cut) and sum(map(len, together)) < sum(map(len, alone))
