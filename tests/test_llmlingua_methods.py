"""method=llmlingua / llmlingua2: hard prompt compression to the kvpress-protocol budget (docs/llmlingua.md).

On the tiny random Llama (scorer and reader) and a tiny random BERT token classifier saved to
tmp_path: ratio 0 is the uncompressed prompt, every ratio keeps at most ceil((1 - r) x n) reader
tokens, LLMLingua-2 is deterministic, a missing classifier is one line. Needs the optional llmlingua
package (`make setup` installs it); every test but the install message is skipped without it.
"""
from __future__ import annotations

import math
import re
import string
import sys
from pathlib import Path

import pytest
import torch

from ctxbench.config.compose import option_config
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question
from ctxbench.methods.kv_prompt import qa_frame, stop_token_ids
from ctxbench.models.loading import load_model

WORDS = ("grass sky sun green blue yellow river stone cloud tree house road window garden bird "
         "quiet small old bright cold warm").split()


def document(n_sentences: int, seed: int = 0) -> str:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_sentences):
        pick = torch.randint(len(WORDS), (7,), generator=g).tolist()
        out.append(" ".join(WORDS[j] for j in pick).capitalize() + ".")
        if i == n_sentences // 2:
            out.append("The special magic number for fluffy-cat is 7421938.")
    return " ".join(out)


HIST = History(id="d", text=document(24))
Q = Question(id="q", question="What is the special magic number for fluffy-cat?", answer="7421938")


@pytest.fixture(scope="module")
def llmlingua():
    return pytest.importorskip("llmlingua", reason="method=llmlingua needs the llmlingua package (make setup)")


@pytest.fixture(scope="module")
def tiny(llmlingua):
    return load_model(option_config("model", {"name": "tiny"}))


def tiny_classifier(folder: Path) -> Path:
    """A random 2-layer BERT token classifier (keep / drop) whose WordPiece vocabulary spells any ASCII
    word: single characters, and ``##`` + a character to continue a word."""
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    chars = string.ascii_letters + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(string.punctuation + chars) + ["##" + c for c in chars]
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False)
    conf = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=512, num_labels=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertForTokenClassification(conf).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def method(bundle, name: str = "llmlingua", **kw):
    return build("method", option_config("method", {"name": name, "max_new_tokens": 6, **kw}), bundle=bundle)


def uncompressed_answer(bundle, m) -> tuple[str, int]:
    """The reader's greedy answer with the whole history in the prompt, and the history's tokens."""
    tok = bundle.tokenizer
    before, after = qa_frame(tok, m.answer_prompt, Q, [])
    ids = tok(before + HIST.text + after, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = bundle.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=6, do_sample=False,
                                    eos_token_id=stop_token_ids(tok), pad_token_id=tok.pad_token_id)
    new = [t for t in out[0, len(ids):].tolist()]
    stop = set(stop_token_ids(tok))
    new = new[: next((i for i, t in enumerate(new) if t in stop), len(new))]
    return tok.decode(new, skip_special_tokens=True).strip(), len(tok(HIST.text, add_special_tokens=False)["input_ids"])


def test_missing_package_names_the_install_command(monkeypatch):
    from ctxbench.methods import prompt_compression

    monkeypatch.setitem(sys.modules, "llmlingua", None)  # import llmlingua → ModuleNotFoundError
    with pytest.raises(ConfigError, match=r"pip install --no-deps llmlingua==0\.2\.2 tiktoken"):
        prompt_compression.import_llmlingua()


def test_ratio_zero_is_the_uncompressed_prompt(tiny):
    m = method(tiny)
    m.set_compression_ratio(0.0)
    m.ingest(HIST)
    p = m.answer(Q)
    text, n = uncompressed_answer(tiny, m)
    assert p.text == text
    assert p.usage.held_text == n == p.usage.memory_tokens and p.usage.extra["budget"] == n
    assert p.usage.extra["compression_ratio"] == 0.0 and m.construction_usage().construction_prompt_tokens == 0


@pytest.mark.parametrize("ratio", [0.5, 0.8])
def test_llmlingua_keeps_the_budget(tiny, ratio):
    m = method(tiny, iterative_size=64)
    m.set_compression_ratio(ratio)
    m.ingest(HIST)
    p = m.answer(Q)
    n = p.usage.memory_tokens
    assert n > 500 and p.usage.extra["budget"] == math.ceil((1 - ratio) * n)
    assert 0 < p.usage.held_text <= p.usage.extra["budget"]
    assert p.usage.held_text >= 0.6 * p.usage.extra["budget"]  # compressed to about the budget, not emptied
    assert p.usage.extra["budget_cut_tokens"] == 0  # LLMLingua's own pruning met it
    assert m.construction_usage().construction_prompt_tokens >= n  # the scorer read the whole text
    assert p.usage.answer_calls == 1 and p.usage.answer_completion_tokens <= 6


def test_config_ratio_and_bad_ratio(tiny):
    m = method(tiny, compression_ratio=0.25)
    assert m.ratio == 0.25
    with pytest.raises(ConfigError, match=r"must be in \[0, 1\)"):
        m.set_compression_ratio(1.0)


def test_llmlingua2_keeps_the_budget_and_is_deterministic(tiny, tmp_path):
    folder = tiny_classifier(tmp_path / "clf")
    runs = []
    for _ in range(2):
        m = method(tiny, "llmlingua2", classifier=str(folder))
        m.set_compression_ratio(0.5)
        m.ingest(HIST)
        p = m.answer(Q)
        runs.append((m._kept, p.text, p.usage.held_text))
        n = p.usage.memory_tokens
        assert 0 < p.usage.held_text <= math.ceil(0.5 * n) == p.usage.extra["budget"]
        assert m.construction_usage().construction_prompt_tokens > 0
    assert runs[0] == runs[1]
    words = re.findall(r"\w+", runs[0][0])
    assert set(words) <= set(re.findall(r"\w+", HIST.text)) and len(words) > 20  # the history's words, none made up


@pytest.mark.parametrize("given, says", [(None, "needs method.classifier"), ("/nonexistent/llmlingua-2", "no config.json")])
def test_llmlingua2_without_a_classifier_is_one_line(tiny, given, says):
    with pytest.raises(ConfigError, match=says) as e:
        method(tiny, "llmlingua2", classifier=given)
    assert "\n" not in str(e.value) and "microsoft/llmlingua-2" in str(e.value)


def test_llmlingua2_refuses_a_causal_lm_folder(tiny):
    from ctxbench.models.loading import tiny_dir

    folder = tiny_dir(option_config("model", {"name": "tiny"}))
    with pytest.raises(ConfigError, match="not a token classifier"):
        method(tiny, "llmlingua2", classifier=str(folder))


def test_an_overshoot_is_asked_again_then_cut_to_the_budget(tiny, monkeypatch):
    """A compressor that keeps more than asked: asked RETRIES times with a lowered target, then cut."""
    from ctxbench.methods.prompt_compression import RETRIES

    m = method(tiny)
    targets = []
    monkeypatch.setattr(m, "compress", lambda text, target: targets.append(target) or text[: len(text) * 3 // 4])
    m.set_compression_ratio(0.5)
    m.ingest(HIST)
    u = m.construction_usage()
    budget = u.extra["budget"]
    assert len(targets) == RETRIES == u.construction_calls and targets[0] == budget and targets[1] < budget
    assert u.memory_items <= budget and u.extra["budget_cut_tokens"] > 0
    assert HIST.text.startswith(m._kept)  # the first tokens that fit
