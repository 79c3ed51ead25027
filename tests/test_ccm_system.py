"""CCM as a data consumer and as an evaluated system (tiny model): LoCoMo / text training examples,
online ingest + answer with usage, the comparison table, and the hub loaders' offline error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.data.errors import DataError
from ctxbench.methods.ccm import CCM, Memory
from ctxbench.methods.ccm_eval import compare, eval_windows, markdown
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def make(which: str, **over) -> CCM:
    bundle = load_model(option_config("model", {"name": "tiny", "attn_implementation": "eager"}))
    cfg = load_conf_file(f"conf/method/ccm_{which}.yaml")
    for k, v in over.items():
        OmegaConf.update(cfg, k, v)
    return build("method", cfg, bundle=bundle)


@pytest.fixture(scope="module")
def conv26() -> Sample:
    if not (DATA / "locomo10.json").exists():
        pytest.skip(f"no LoCoMo file at {DATA / 'locomo10.json'} (the shared data folder)")
    samples = build("dataset", option_config("dataset", {"name": "locomo", "path": str(DATA / "locomo10.json"),
                                                 "conversations": ["conv-26"]}))
    return list(samples)[0]


def test_locomo_training_examples(conv26):
    m = make("merge", n_tok=2, train_steps=3, max_session_tokens=96)
    examples = m.train_examples([conv26])
    n_sessions = len([s for s in conv26.history.sessions if s.turns])
    session_ex = [e for e in examples if e.n_steps == 3 and e.step[-1] == 3]
    qa_ex = [e for e in examples if e.step[-1] == e.n_steps + 1]
    assert len(session_ex) == n_sessions - 2  # windows of 3 consecutive sessions
    assert qa_ex and len(qa_ex) <= len(conv26.questions)
    ex = session_ex[0]
    assert sum(1 for c in ex.is_comp if c) == 3 * 2
    assert max(ex.step) == 3 and sum(l != -100 for l in ex.labels) > 0
    first = m.tokenizer.decode([t for t, s, c in zip(ex.input_ids, ex.step, ex.is_comp) if s == 1 and not c])
    assert "DATE:" in first and "Caroline" in first  # session rendered with its date
    # a QA example: loss only on the answer, which decodes to the gold answer
    q = qa_ex[0]
    ans = [t for t, l in zip(q.input_ids[1:], q.labels[:-1]) if l != -100]
    assert [l for l in q.labels if l != -100] == ans
    golds = {str(x.answer) for x in conv26.questions}
    decoded = m.tokenizer.decode(ans).replace(m.tokenizer.eos_token, "")
    assert decoded in golds
    batch = m.collate(examples[:2])
    out = m(batch)
    assert torch.isfinite(out.loss) and out.n_tokens > 0


def test_text_stream_examples_and_loss_targets():
    m = make("concat", n_tok=2, step_tokens=16, train_steps=4)
    doc = "To be, or not to be, that is the question. " * 8
    ex = m.train_examples([Sample(History(id="d", text=doc), [])])
    ids = m.encode(doc)
    n_chunks = len([c for c in (ids[j:j + 16] for j in range(0, len(ids), 16)) if len(c) > 1])
    assert len(ex) == len([j for j in range(0, n_chunks - 1, 4) if min(j + 4, n_chunks) - j >= 2])
    e = ex[0]
    assert e.n_steps == 4
    text1 = [t for t, s, c in zip(e.input_ids, e.step, e.is_comp) if s == 1 and not c]
    assert text1 == ids[:16]
    # step 1 carries no loss; step 2's tokens predict the next token of step 2
    labels2 = [l for l, s, c in zip(e.labels, e.step, e.is_comp) if s == 2 and not c]
    assert all(l == -100 for l, s in zip(e.labels, e.step) if s == 1)
    assert labels2 == ids[17:32] + [-100]


@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_ingest_and_answer_report_memory(mode):
    m = make(mode, n_tok=4, max_new_tokens=5)
    sessions = [Session(id=f"session_{i}", date=f"{i} May 2023",
                        turns=[Turn("Ann", f"I adopted a cat named Tom {i}."), Turn("Bob", "Nice!")]) for i in (1, 2, 3)]
    m.ingest(History(id="h", sessions=sessions, speakers=["Ann", "Bob"]))
    assert m.memory.n_steps == 3
    slots = 12 if mode == "concat" else 4
    assert m.memory.slots == slots
    pred = m.answer(Question(id="q1", question="What is the cat's name?", answer="Tom", category=4,
                             category_name="single-hop"))
    u = pred.usage
    assert u.memory_items == slots and u.held_kv_slots == u.held == slots
    assert u.kv_bytes == m.memory.kv_bytes > 0 and u.extra["kv_entries"] == m.memory.kv_entries
    assert u.answer_calls == 1 and u.answer_completion_tokens <= 5 and u.construction_calls == 3
    assert isinstance(pred.text, str)
    # memory is kept across questions: answering twice gives the same text
    assert m.answer(Question(id="q1", question="What is the cat's name?", answer="Tom", category=4,
                             category_name="single-hop")).text == pred.text
    # documents: steps of step_tokens
    m.cfg.step_tokens = 20
    m.ingest(History(id="d", text="x" * 70))
    assert m.memory.n_steps == 4


def test_generation_reads_the_memory_and_matches_recurrent_logits():
    m = make("concat", n_tok=2)
    steps = [m.encode("hello there"), m.encode("general kenobi")]
    mem = Memory()
    for s in steps:
        mem, _ = m.compress_step(mem, s)
    prompt = m.encode("who?")
    logits, _ = m.read(mem, prompt)
    first = int(logits[0, -1].argmax())
    out = m.generate(mem, prompt, 3)
    assert not out or out[0] == first


def test_comparison_table_on_tiny():
    m = make("merge", n_tok=2, step_tokens=8)
    ids = m.encode("abcdefghij" * 20)
    assert len(eval_windows(ids, 3, 8, 100)) == len(ids) // 32
    rows = compare(m.model, {"ccm_merge": m}, ids, steps=3, step_tokens=8, n=2)
    by = {r["system"]: r for r in rows}
    assert list(by) == ["no_context", "ccm_merge", "full_context"]
    assert by["no_context"]["tokens"] == by["ccm_merge"]["tokens"] == by["full_context"]["tokens"] == 2 * 7
    assert by["ccm_merge"]["slots"] == 2 and by["full_context"]["slots"] == 24
    layers = m.model.config.num_hidden_layers
    assert by["full_context"]["kv_entries"] == 24 * layers * m.model.config.num_key_value_heads * 2
    assert "| ccm_merge |" in markdown(rows, 3, 8)


def test_hub_loaders_fail_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for name in ("ccm_dailydialog", "ccm_metaicl"):
        with pytest.raises(DataError, match="needs the Hugging Face hub"):
            build("dataset", load_conf_file(f"conf/dataset/{name}.yaml"))
    with pytest.raises(DataError, match=r"dataset.path.*ciir.cs.umass.edu/downloads/LaMP/LaMP_2/dev/dev_questions"):
        build("dataset", load_conf_file("conf/dataset/ccm_lamp.yaml"))


def test_metaicl_files_in_their_own_format(tmp_path):
    task = tmp_path / "superglue-cb"
    task.mkdir()
    demos = [{"task": "superglue-cb", "input": f"premise {i}", "output": "true", "options": ["true", "false"]}
             for i in range(16)]
    tests = [{"task": "superglue-cb", "input": "premise x", "output": "false", "options": ["true", "false"]}]
    (task / "superglue-cb_16_100_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in demos))
    (task / "superglue-cb_16_100_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tests))
    cfg = load_conf_file("conf/dataset/ccm_metaicl.yaml")
    cfg.path = str(tmp_path)
    [s] = build("dataset", cfg)
    assert len(s.history.sessions) == 16 and s.history.sessions[0].turns[0].text == "premise 0\nOutput: true"
    assert s.questions[0].options == ["true", "false"] and s.questions[0].answer == "false"
    cfg.sampling_seed = 13
    with pytest.raises(DataError, match="superglue-cb_16_13_train.jsonl"):
        build("dataset", cfg)


def test_lamp_files_in_the_benchmarks_own_format(tmp_path):
    qs = [{"id": "110", "input": "Which tag does this movie relate to? [x]", "profile": [
        {"id": "1100", "tag": "comedy", "description": "a funny film"}, {"id": "1101", "tag": "sci-fi", "description": "space"}]}]
    (tmp_path / "dev_questions.json").write_text(json.dumps(qs))
    (tmp_path / "dev_outputs.json").write_text(json.dumps({"task": "LaMP_2", "golds": [{"id": "110", "output": "comedy"}]}))
    cfg = load_conf_file("conf/dataset/ccm_lamp.yaml")
    cfg.path = str(tmp_path)
    [s] = build("dataset", cfg)
    assert [t.text for sess in s.history.sessions for t in sess.turns] == ["tag: comedy description: a funny film",
                                                                           "tag: sci-fi description: space"]
    assert s.questions[0].answer == "comedy"
    (tmp_path / "dev_outputs.json").write_text(json.dumps({"golds": []}))
    with pytest.raises(DataError, match=r"dev_outputs.json.*no gold output for ids \['110'\]"):
        build("dataset", cfg)


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="method.mode"):
        make("concat", mode="sum")


def test_pwc_documents_give_qa_examples(shared_data):
    samples = build("dataset", option_config("dataset", {"name": "pwc", "path": str(shared_data / "pwc_dev_icae_v2.jsonl")}))
    samples = list(samples)[:2]
    m = make("concat", n_tok=2, step_tokens=64, train_steps=3)
    ex = m.train_examples(samples)
    qa = [e for e in ex if e.step[-1] == e.n_steps + 1]
    assert len(qa) == sum(len(s.questions) for s in samples)
    q = qa[0]
    ans = m.tokenizer.decode([l for l in q.labels if l != -100]).replace(m.tokenizer.eos_token, "")
    assert ans == str(samples[0].questions[0].answer)
    assert all(l == -100 for l, s in zip(q.labels, q.step) if s <= q.n_steps)
