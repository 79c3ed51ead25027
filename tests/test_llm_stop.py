"""Stop strings (ctxbench/llm/stop.py) and llm=hf's own greedy loop (ctxbench/llm/decode.py).

The loop must give every row the tokens it gets alone and the tokens ``generate`` gives, while it
drops finished rows; a stop string must leave the post-processed answer as it was. The tiny random
model's weights are redrawn with std 0.3 (at its default init it emits one token whatever the
prompt), so replies differ from prompt to prompt and a wrong mask, position or dropped row shows.
tests/test_llm_stop_smollm.py (slow) checks real answer prompts on the packaged SmolLM2.
"""
from __future__ import annotations

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.llm.hf import HFChatLLM, llm_model_config
from ctxbench.llm.stop import apply_stop, find_stop, stop_list
from ctxbench.models.loading import load_model
from tests.scripted_llm import ScriptedLLM

QUESTIONS = ["Where is Paris?", "A much longer question about Paris, France, the Seine and its bridges?",
             "Name a color.", "What is 2+2? Explain it to me step by step, please.", "hi", "Who wrote Hamlet?"]


def msgs(q: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Reply briefly."}, {"role": "user", "content": q}]


def test_the_stop_rule():
    assert find_stop("Paris\nFrance", ["\n"]) == 5
    assert apply_stop("\n\n  Paris\nFrance", ["\n"]) == ("\n\n  Paris", True)  # leading blank lines never end it
    assert apply_stop("   \n", ["\n"]) == ("   \n", False)
    assert apply_stop("Paris. France\n", ["\n", ". "]) == ("Paris", True)  # the earliest of several
    assert apply_stop("a-b", ["a"]) == ("a-b", False)  # not at the first character: never an empty reply
    assert apply_stop("Paris", []) == ("Paris", False)
    assert stop_list(None) == [] and stop_list("\n") == ["\n"] and stop_list(["\n", ""]) == ["\n"]
    with pytest.raises(TypeError):
        stop_list([1])


def test_scripted_double_honours_stop():
    llm = ScriptedLLM("Rex\nbecause")
    r = llm.chat(msgs("q"), stop=["\n"])
    assert (r.text, r.stopped, llm.calls[0]["stop"]) == ("Rex", True, ["\n"])
    r = llm.chat(msgs("q"))
    assert (r.text, r.stopped, "stop" in llm.calls[1]) == ("Rex\nbecause", False, False)


@pytest.fixture(scope="module")
def tiny():
    cfg = option_config("llm", {"name": "hf", "model": "tiny", "context_window": 256, "batch_size": 6,
                                "cache": False, "prefix_cache": False})
    bundle = load_model(*llm_model_config(cfg))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in bundle.model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return HFChatLLM(cfg, bundle=bundle)


def rows_of(llm, seqs, max_new_tokens, stops=()):
    return llm._greedy(seqs, max_new_tokens, list(stops))


def generate_rows(llm, seqs, max_new_tokens):
    """What transformers' generate makes of each prompt alone (greedy), cut after a stop token."""
    out = []
    for s in seqs:
        row = llm._generate_hf([s], max_new_tokens, 0.0, None, None, [])[0]
        n = next((j + 1 for j, t in enumerate(row) if t in llm.eos_ids), len(row))
        out.append(row[:n])
    return out


def test_greedy_loop_rows_equal_alone_and_generate(tiny):
    seqs = [tiny.encode_chat(msgs(q)) for q in QUESTIONS]
    assert len({len(s) for s in seqs}) > 3  # left padding differs from row to row
    batched = rows_of(tiny, seqs, 12)
    alone = [rows_of(tiny, [s], 12)[0] for s in seqs]
    assert batched == alone == generate_rows(tiny, seqs, 12)
    assert len({tuple(r) for r in alone}) == len(seqs)  # the replies differ: the check has teeth


def test_finished_rows_leave_the_batch(tiny):
    """A stop string ends some rows early: later forwards run on fewer rows and the others' tokens do not change."""
    seqs = [tiny.encode_chat(msgs(q)) for q in QUESTIONS]
    full = rows_of(tiny, seqs, 16)
    texts = [tiny.tokenizer.decode(r, skip_special_tokens=True) for r in full]
    stop = next(c for c in texts[0][1:] if not c.isspace())  # a character row 0 writes after its first
    sizes: list[int] = []
    hook = tiny.model.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]),
                                                with_kwargs=True)
    try:
        cut = rows_of(tiny, seqs, 16, [stop])
    finally:
        hook.remove()
    assert sizes[0] == 1  # the chat template's common start, computed once for the batch
    assert sizes[1] == len(seqs) and sizes[-1] < len(seqs) and sizes[1:] == sorted(sizes[1:], reverse=True)
    for full_row, cut_row, text in zip(full, cut, texts):
        assert full_row[:len(cut_row)] == cut_row  # the same tokens, up to where the row stopped
        if find_stop(text, [stop]) is None:
            assert cut_row == full_row


def test_hf_stop_gives_the_cut_reply_of_the_whole_one(tiny):
    """chat_batch with a stop string == each whole reply cut by the stop rule; marked stopped, not truncated."""
    batch = [msgs(q) for q in QUESTIONS]
    whole = [tiny.chat(m, max_new_tokens=16) for m in batch]
    stop = next(c for c in whole[0].text[1:] if not c.isspace())
    cut = tiny.chat_batch(batch, max_new_tokens=16, stop=[stop])
    hits = 0
    for w, c in zip(whole, cut):
        text, stopped = apply_stop(w.text, [stop])
        assert (c.text, c.stopped) == (text.strip(), stopped)
        assert c.completion_tokens <= w.completion_tokens and c.prompt_tokens == w.prompt_tokens
        if stopped:
            hits += 1
            assert not c.truncated and c.completion_tokens < 16
    assert hits >= 1


def test_sampled_calls_stop_through_generate(tiny):
    """A sampled call goes through generate with a stopping criterion: the reply is cut the same way."""
    batch = [msgs(q) for q in QUESTIONS[:3]]
    whole = tiny.chat_batch(batch, max_new_tokens=12, temperature=0.7, seed=3)
    stop = next(c for c in whole[0].text[1:] if not c.isspace())
    cut = tiny.chat_batch(batch, max_new_tokens=12, temperature=0.7, seed=3, stop=[stop])
    assert cut[0].stopped and cut[0].text == apply_stop(whole[0].text, [stop])[0].strip()
