"""fp32 master weights under a bf16 base, for every trainable method (tiny model, CPU).

What the 7B configs (``model.dtype: bfloat16``) train: every trainable weight is float32 (ICAE's
memory embeddings, CCM's COMP embeddings and conditional LoRA, LoCoCo's compressors, peft LoRA;
and base weights a method trains, e.g. full fine-tuning), the frozen base stays bf16; a step under
bf16 autocast (what the loop runs with ``trainer.precision=bf16``) gives a finite loss and moves
every trainable, even at a learning rate whose updates a bf16 weight could not hold.
"""
from __future__ import annotations

import pytest
import torch
from method_cases import CASES, build_case, trainables

BF16 = torch.bfloat16


def autocast():
    return torch.autocast("cpu", dtype=BF16)


@pytest.mark.parametrize("case", CASES)
def test_trainables_are_fp32_and_the_frozen_base_stays_bf16(case):
    m, _ = build_case(case, BF16)
    train = trainables(m)
    assert train
    wrong = {n: p.dtype for n, p in m.named_parameters() if p.dtype != (torch.float32 if p.requires_grad else BF16)}
    assert not wrong, wrong
    assert all(v.dtype == torch.float32 for v in m.trainable_state_dict().values())


@pytest.mark.parametrize("case", CASES)
def test_a_bf16_autocast_step_moves_every_fp32_trainable(case):
    m, batch = build_case(case, BF16)
    train = trainables(m)
    before = {n: p.detach().clone() for n, p in train.items()}
    frozen = {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad}
    m.train()
    # lr 1e-4: Adam's first step moves each weight by ~1e-4, below bf16's resolution at |w| > 0.03
    opt = torch.optim.AdamW(list(train.values()), lr=1e-4, weight_decay=0.0)
    with autocast():
        out = m(batch)
    assert torch.isfinite(out.loss) and out.n_tokens > 0
    out.loss.backward()
    for n, p in train.items():
        assert p.grad is not None and p.grad.dtype == torch.float32 and bool(torch.isfinite(p.grad).all()), n
    opt.step()
    # (CCM's last-layer q/o adapters get an exact zero: no later token reads a COMP token's output there)
    moved = {n: not torch.equal(p.detach(), before[n]) for n, p in train.items() if bool(p.grad.any())}
    assert moved and all(moved.values()), [n for n, ok in moved.items() if not ok]
    assert all(torch.equal(p, frozen[n]) and p.dtype == BF16 for n, p in m.named_parameters() if n in frozen)


@pytest.mark.parametrize("case", CASES)
def test_a_bf16_base_with_fp32_trainables_runs_without_autocast(case):
    """``trainer.precision=fp32`` over a bf16 model: the seams cast (no dtype mismatch), grads reach
    every trainable."""
    m, batch = build_case(case, BF16)
    m.train()
    out = m(batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in trainables(m).values())


@pytest.mark.parametrize("case", ["icae_pretrain", "ccm_concat", "lococo"])
def test_fp32_trainables_round_trip_into_a_fresh_bf16_method(case):
    a, batch = build_case(case, BF16)
    with torch.no_grad():
        for p in trainables(a).values():
            p.add_(1e-3)  # a change only fp32 can hold
    state = a.trainable_state_dict()
    b, _ = build_case(case, BF16)
    b.load_trainable(state)
    for n, p in trainables(b).items():
        assert p.dtype == torch.float32 and torch.equal(p.detach(), state[n]), n
    a.eval(), b.eval()
    with torch.no_grad(), autocast():
        assert float(a(batch).loss) == float(b(batch).loss)


def test_icae_kv_bytes_count_the_decoder_dtype_not_the_fp32_slots():
    m, _ = build_case("icae_pretrain", BF16)
    conf = m.base.config
    per_pos = conf.num_hidden_layers * 2 * conf.num_key_value_heads * (conf.hidden_size // conf.num_attention_heads)
    assert m.kv_bytes(10) == 10 * per_pos * 2


@pytest.mark.parametrize("case", ["lm_full", "icae_pretrain", "ccm_merge", "lococo_lora_embed"])
def test_a_bf16_base_with_fp32_trainables_ingests_and_answers_without_autocast(case):
    """Evaluation loads the bf16 base, builds the method (fp32 trainables) and answers with no
    autocast: compression, memory and decoding cast where the two meet."""
    from ctxbench.core.types import History, Question, Session, Turn

    m, _ = build_case(case, BF16)
    turns = [Turn(speaker="Ann", text="I adopted a cat named Pixel last week."),
             Turn(speaker="Bob", text="Nice, what colour is she?"), Turn(speaker="Ann", text="Grey with white paws.")]
    history = History(id="h", sessions=[Session(id="session_1", date="1 May 2023", turns=turns)], speakers=["Ann", "Bob"])
    m.cfg.max_new_tokens = 4
    m.ingest(history)
    pred = m.answer(Question(id="q", question="What is the cat's name?", answer="Pixel"))
    assert isinstance(pred.text, str) and pred.usage.answer_calls == 1
