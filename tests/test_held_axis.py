"""One budget axis across paradigms: what the answering model holds when it answers.

Every family counts it the same way (``Usage.held_text`` / ``held_kv_slots`` / ``held_soft_slots``,
summed by ``Usage.held``, averaged by ``aggregate_cost`` into results.json ``cost.held_per_question``):
a text system counts the history or memory text left in its prompt after the backend trimmed it; a KV press and
CCM count the KV slots the answer attends to; ICAE counts its soft slots, which its answer prompt
tokens do not (slots are held, not fed as tokens). Tiny random models; the answers are noise.
"""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from ctxbench.config.compose import option_config
from ctxbench.config.schemas import load_conf_file
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Session, Turn, Usage
from ctxbench.llm.fit import MARK, cut_middle, kept_pieces
from ctxbench.methods.kv_prompt import qa_frame
from ctxbench.metrics.cost import aggregate_cost
from ctxbench.models.loading import load_model
from memory_scripted import BowEmbedder

TURNS = [Turn("Ann" if i % 2 == 0 else "Bob", f"I moved to city number {i} last year and I like it.", f"D1:{i}")
         for i in range(12)]
HISTORY = History(id="h", sessions=[Session("1", TURNS, date="1 May 2023")], speakers=["Ann", "Bob"])
QUESTION = Question(id="q1", question="Where did Ann move?", answer="city", category=4)


@pytest.fixture(scope="module")
def tiny():
    return load_model(option_config("model", {"name": "tiny"}))


def answer(system) -> Usage:
    system.ingest(HISTORY)
    return system.answer(QUESTION).usage


def held(u: Usage) -> tuple[int, int, int]:
    return u.held_text, u.held_kv_slots, u.held_soft_slots


def test_a_memory_system_holds_only_the_text_the_backend_left(tiny, tmp_path):
    from ctxbench.llm.hf import HFChatLLM
    from ctxbench.memory.rag import RAG

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 400}), bundle=tiny)
    cfg = option_config("memory", {"name": "rag", "k": 50, "chunk_size": 2, "overlap": 0, "progress": False})
    rag = RAG(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path / "rag")
    rag.ingest(HISTORY)
    pred = rag.answer(QUESTION)
    u, shown = pred.usage, pred.meta["context"]
    assert llm.truncated_calls == 1  # every chunk retrieved: over the window, the backend cut the prompt
    assert 0 < u.held_text < llm.count_tokens(shown)  # only what survived the cut is held
    assert held(u)[1:] == (0, 0) and u.held == u.held_text
    # the prompt as sent = its frame (instructions, question, template) + the cut mark + the held text
    frame = len(llm.encode_chat(rag.answer_messages("x", QUESTION))) - 1  # "x": one byte-level token
    assert abs(u.answer_prompt_tokens - frame - llm.count_tokens(MARK) - u.held_text) <= 4
    assert u.answer_prompt_tokens <= 400 - rag.answer_max_tokens()


def test_lm_holds_the_history_tokens_it_kept(tiny):
    cfg = OmegaConf.merge(load_conf_file("ctxbench/conf/method/lm.yaml"),
                          {"max_context": 400, "lora": {"enabled": False}, "max_new_tokens": 4})
    u = answer(build("method", cfg, bundle=tiny))
    assert u.extra["truncated_tokens"] > 0  # the history did not fit 400 tokens: the oldest were cut
    assert held(u) == (u.memory_tokens - u.extra["truncated_tokens"], 0, 0) and 0 < u.held < 400
    assert u.answer_prompt_tokens > u.held_text  # the held text is in the prompt, beside its frame


@pytest.mark.parametrize("name", ["streamingllm", "h2o"])
def test_a_press_holds_its_kv_slots(tiny, name):
    m = build("method", option_config("method", {"name": name, "positions": "absolute", "segment_len": 32,
                                                 "mem_size": 48, "max_new_tokens": 4}), bundle=tiny)
    u = answer(m)
    assert held(u) == (0, 48, 0) and u.held == 48 and u.kv_bytes > 0
    _, after = qa_frame(m.tokenizer, m.answer_prompt, QUESTION, HISTORY.speakers)
    # the question's tokens alone: the slots are held, not fed
    assert u.answer_prompt_tokens == len(m.tokenizer(after, add_special_tokens=False)["input_ids"])


def test_ccm_holds_its_compressed_kv_slots():
    bundle = load_model(option_config("model", {"name": "tiny", "attn_implementation": "eager"}))
    cfg = OmegaConf.merge(load_conf_file("ctxbench/conf/method/ccm_concat.yaml"), {"n_tok": 4, "max_new_tokens": 4})
    m = build("method", cfg, bundle=bundle)
    u = answer(m)
    assert held(u) == (0, m.memory.slots, 0) and m.memory.slots == 4 * m.memory.n_steps  # concat: 4 per step


def test_icae_holds_soft_slots_that_its_prompt_tokens_do_not_count(tiny):
    cfg = OmegaConf.merge(load_conf_file("ctxbench/conf/method/icae_pretrain.yaml"),
                          {"mem_size": 4, "compression_rate": 4, "max_segments": 2, "max_new_tokens": 4})
    m = build("method", cfg, bundle=load_model(option_config("model", {"name": "tiny"})))
    u = answer(m)
    assert held(u) == (0, 0, 8) and u.held == 8  # two segments of 4 slots
    assert u.answer_prompt_tokens == u.extra["decoder_prompt_tokens"] - 8


def test_cost_names_the_axis_and_sums_the_kinds():
    recs = [{"history_id": "h", "answer_seconds": 0.1, "construction": {},
             "usage": Usage(held_text=t, held_kv_slots=k, held_soft_slots=s, kv_bytes=b).to_dict()}
            for t, k, s, b in ((30, 0, 0, 0), (0, 128, 0, 4096), (0, 0, 128, 2048))]
    h = aggregate_cost(recs)["held_per_question"]
    assert "KV slots" in h["axis"] and "soft slots" in h["axis"]
    assert (h["text"], h["kv_slots"], h["soft_slots"], h["total"], h["kv_bytes"]) == (10, 42.67, 42.67, 95.33, 2048)
    assert Usage.from_dict({"context_tokens": 7, "held_text": 3}).held == 3  # an old key is dropped, not guessed


def test_kept_pieces_are_the_head_and_tail_the_cut_left():
    text = "a" * 50 + "b" * 50
    msg = "INTRO " + text + " QUESTION"
    sent = cut_middle(msg, 40)
    head, tail = kept_pieces(text, msg, sent)
    assert set(head) == {"a"} and set(tail) == {"b"}  # the middle of the history went, its ends stayed
    assert len(head) + len(tail) == len(sent) - len(MARK) - len("INTRO  QUESTION")
    assert kept_pieces(text, msg, msg) == [text] and kept_pieces("", msg, sent) == []


def test_an_openai_backend_reports_the_messages_it_would_send(monkeypatch):
    from ctxbench.llm.fit import held_text_tokens
    from ctxbench.llm.openai_compat import OpenAIChatLLM

    monkeypatch.setenv("CTXBENCH_TEST_KEY", "sk-test-123456789")
    llm = OpenAIChatLLM(option_config("llm", {"name": "openai", "model": "m", "base_url": "http://127.0.0.1:9",
                                              "api_key_env": "CTXBENCH_TEST_KEY", "context_window": 300,
                                              "cache": False}))
    history = " ".join(f"turn {i} of the history." for i in range(200))
    msgs = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"Conversation:\n{history}\n\nQuestion: what?"}]
    sent = llm.fitted(msgs, 20)
    assert sent[0] == msgs[0] and MARK in sent[1]["content"] and llm.truncated_calls == 0  # asking cuts nothing
    held = held_text_tokens(llm, msgs, history, 20)
    assert held == sum(llm.count_tokens(p) for p in kept_pieces(history, msgs[1]["content"], sent[1]["content"]))
    assert 0 < held < llm.count_tokens(history) and held <= 300 - 20
