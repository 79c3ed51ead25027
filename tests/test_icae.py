"""ICAE on the tiny model: slots carry the context, the decoder sees only slots, base weights stay
frozen, the trainable state round-trips, examples/batches are laid out as the reference does."""
from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.methods import icae_data as D
from ctxbench.methods.icae import qa_text
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

TEXTS = ["The quick brown fox jumps over.", "A lazy dog sleeps in the sun!!"]


def method_cfg(**over):
    from pathlib import Path

    conf = Path(__file__).resolve().parents[1] / "conf" / "method" / "icae_pretrain.yaml"
    return OmegaConf.merge(load_conf_file(conf), over)


def make(mode: str = "pretrain", rescale: bool = False, **over):
    """A fresh tiny model (peft wraps it in place) and an ICAE method on it.

    ``rescale``: re-draw the random weights at the scale of a trained model (embeddings std 0.5,
    linear layers 1/sqrt(fan_in)); at the default init (std 0.02) the frozen tiny decoder cannot
    put more than ~1% probability on any token, so no encoder could drive the AE loss down.
    """
    bundle = load_model(option_config("model", {"name": "tiny"}))
    if rescale:
        torch.manual_seed(1)
        with torch.no_grad():
            for n, p in bundle.model.named_parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.5 if "embed" in n else 1 / math.sqrt(p.shape[1]))
    name = "icae_finetune" if mode == "finetune" else "icae_pretrain"
    torch.manual_seed(0)
    return build("method", method_cfg(name=name, mode=mode, **over), bundle=bundle)


def step(method, batch, lr=1e-2):
    opt = torch.optim.Adam([p for p in method.parameters() if p.requires_grad], lr=lr)
    out = method(batch)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    return out


def test_ae_training_drives_reconstruction_loss_near_zero():
    m = make(rescale=True, mem_size=16, slot_norm="none", lambda_ae=1.0)  # raw last-layer states; AE only: λ = 1
    batch = m.collate([D.Example(context=m.layout.encode(t)) for t in TEXTS])
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    first = None
    for _ in range(900):
        out = m(batch)
        first = first if first is not None else float(out.loss.detach())
        if float(out.loss.detach()) < 0.05:
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert first > 3.0 and float(out.loss) < 0.1, (first, float(out.loss))
    assert out.stats["ae_loss"] == pytest.approx(float(out.loss))
    # greedy reconstruction from [slots][AE] gives each text back ...
    assert [m.reconstruct(t) for t in TEXTS] == TEXTS
    # ... and the information is in the slots: decoding text 0 from text 1's slots fails
    codes, labels = m.layout.ae(m.layout.encode(TEXTS[0]))
    s0, _ = m.compress(m.layout.encode(TEXTS[0]))
    s1, _ = m.compress(m.layout.encode(TEXTS[1]))

    def nll(slots):
        logits = m.decoder_logits(codes, slots)[:-1]
        lab = torch.tensor(labels[1:])
        return float(torch.nn.functional.cross_entropy(logits[lab != -100], lab[lab != -100]))

    assert nll(s0) < 0.1 and nll(s1) > 1.0


def test_decoder_sees_only_slots():
    m = make()
    m.eval()
    a = History(id="a", text="Alice keeps her bicycle in the red shed behind the school. " * 3)
    b = History(id="b", text="Bob parks the blue car at the station every single morning. " * 3)
    q = Question(id="q", question="Where is the bicycle?", answer="red shed", category_name="pwc")
    m.ingest(a)
    slots_a = m._slots.clone()
    pred_a = m.answer(q)
    m.ingest(b)
    slots_b = m._slots.clone()
    assert not torch.equal(slots_a, slots_b)  # different context → different slots
    # the decoder prompt holds no context token: template + slots + [FT] + question only
    prompt = m.layout.encode(qa_text(q))
    codes = m.layout.ft_prompt(slots_a.shape[0], prompt)
    assert pred_a.usage.extra["decoder_prompt_tokens"] == len(codes)
    assert pred_a.usage.answer_prompt_tokens == len(codes) - slots_a.shape[0]  # slots are held, not fed as tokens
    assert set(codes) - {D.SLOT, D.FT} <= set(m.layout.chat_left + m.layout.chat_right + prompt)
    # same slots → identical logits whatever history was ingested last; other slots → other logits
    m._slots = slots_a
    again = m.answer(q)
    assert again.text == pred_a.text
    la, la2 = m.decoder_logits(codes, slots_a), m.decoder_logits(codes, slots_a.clone())
    assert torch.equal(la, la2)
    assert not torch.allclose(la, m.decoder_logits(codes, slots_b))
    # in training, mutating the encoder's context ids changes the slots but never the decoder input
    ex = D.Example(context=m.layout.encode(a.text[:60]), prompt=prompt, answer=m.layout.encode("red shed"))
    m.mode = "finetune"
    batch = m.collate([ex])
    other = dict(batch, enc_ids=torch.randint(10, 200, batch["enc_ids"].shape))
    assert torch.equal(batch["dec_ids"], other["dec_ids"])
    assert float(m(batch).loss.detach()) != float(m(other).loss.detach())


def test_usage_counts_slots_and_compression():
    m = make(mem_size=4, compression_rate=4, max_segments=2)
    h = History(id="h", sessions=[Session("s1", [Turn("A", "hello there, how are you doing today?"),
                                                 Turn("B", "fine thanks, I went hiking in the hills.")],
                                          date="1 May 2023")])
    m.ingest(h)
    n_ctx = len(m.layout.encode(h.render()))
    q = Question(id="q", question="What did B do?", answer="hiking", category=4, category_name="single-hop")
    p = m.answer(q)
    u = p.usage
    assert u.held_soft_slots == u.memory_items == u.held == 2 * 4  # two most recent segments kept
    assert u.held_text == u.held_kv_slots == 0
    assert u.extra["dropped_tokens"] == n_ctx - u.extra["context_tokens_compressed"] > 0
    assert u.extra["compression_rate"] == pytest.approx(u.extra["context_tokens_compressed"] / 8)
    frame = len(m.layout.chat_left) + len(m.layout.chat_right) + 1  # template + [FT]
    # the slots are held, not fed as tokens: the answer prompt counts the decoder prompt's text tokens alone
    assert u.extra["decoder_prompt_tokens"] == frame + 8 + len(m.layout.encode(qa_text(q)))
    assert u.answer_prompt_tokens == frame + len(m.layout.encode(qa_text(q)))
    assert u.kv_bytes == 8 * 2 * 2 * 2 * 16 * 4  # slots × layers × (k,v) × kv heads × head dim × fp32
    cu = m.construction_usage()
    assert cu.construction_calls == 2 and cu.construction_prompt_tokens == u.extra["context_tokens_compressed"] + 8


def test_most_recent_segments_are_kept():
    m = make(mem_size=4, compression_rate=4)
    m.eval()
    ids = m.layout.encode("one two three four five six seven eight nine ten eleven twelve")
    segs = D.segment(ids, 16)
    assert len(segs) > 2 and sum(map(len, segs)) == len(ids) and max(map(len, segs)) <= 16
    full, _ = m.compress(ids)
    last, kept = m.compress(ids, max_segments=1)
    assert full.shape[0] == len(segs) * 4 and last.shape[0] == 4 and kept == len(segs[-1])
    assert torch.allclose(last, full[-4:], atol=1e-5)  # segments are encoded independently


def test_base_weights_frozen_and_only_lora_and_embeddings_train():
    m = make()
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert "memory_embed" in trainable
    assert all(n == "memory_embed" or ".lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad}
    before = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    texts = ["Some text about the sea and the ships on it. " * 4]
    ex = m.train_examples([Sample(History(id="t", text=texts[0]), [])])
    for _ in range(2):
        out = step(m, m.collate(ex))
    assert torch.isfinite(out.loss)
    for n, p in m.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), f"base weight {n} changed"
    changed = [n for n, p in m.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert "memory_embed" in changed and any("lora_B" in n for n in changed)


def test_trainable_state_round_trips_and_loads_into_finetune(tmp_path):
    from safetensors.torch import load_file, save_file

    m = make()
    ex = m.train_examples([Sample(History(id="t", text="Round trip of the trained state. " * 6), [])])
    step(m, m.collate(ex))
    state = m.trainable_state_dict()
    save_file(state, str(tmp_path / "w.safetensors"))
    loaded = load_file(str(tmp_path / "w.safetensors"))
    ft = make("finetune")
    assert ft.mode == "finetune"
    assert not torch.equal(ft.memory_embed, m.memory_embed)
    ft.load_trainable(loaded)
    got = ft.trainable_state_dict()
    assert got.keys() == state.keys()
    assert all(torch.equal(got[k], state[k]) for k in state)
    m.eval(), ft.eval()
    ids = m.layout.encode("Round trip of the trained state.")
    assert torch.equal(m.compress(ids)[0], ft.compress(ids)[0])


def test_lambda_mixes_ae_and_lm_and_sampling_picks_one():
    text = "It was the best of times, it was the worst of times, it was the age of wisdom. " * 3
    m = make(context_tokens=64, lm_tokens=40, leave_tokens_for_lm=4)
    ex = m.train_examples([Sample(History(id="t", text=text), [])])
    assert ex and all(len(e.context) <= 64 and len(e.continuation) <= 40 for e in ex)
    assert ex[0].context + ex[0].continuation == m.layout.encode(text)[:104]
    batch = m.collate(ex[:1])
    assert batch["dec_kind"].tolist() == [D.KIND["ae"], D.KIND["lm"]]
    lm_row = batch["dec_labels"][1]
    lab = lm_row[lm_row != -100].tolist()
    assert lab == ex[0].continuation[4:]  # no loss on the first leave_tokens_for_lm tokens
    m.eval()
    for lam in (1.0, 0.0, 0.3):
        m.lambda_ae = lam
        out = m(batch)
        want = lam * out.stats["ae_loss"] + (1 - lam) * out.stats["lm_loss"]
        assert float(out.loss) == pytest.approx(want, rel=1e-5)
    s = make(objective_sampling=True, lm_ratio=0.5, context_tokens=64, lm_tokens=40)
    kinds = s.collate(ex * 20)["dec_kind"].tolist()
    assert len(kinds) == len(ex) * 20 and set(kinds) == {0, 1}


def test_finetune_examples_from_pwc_rows(shared_data):
    m = make("finetune", max_context_tokens=256)
    samples = build("dataset", option_config("dataset", {"name": "pwc", "path": str(shared_data / "pwc_dev_icae_v2.jsonl")}))
    ex = m.train_examples(list(samples))
    assert len(ex) == sum(len(s.questions) for s in samples) > 0
    q = samples[0].questions[0]
    assert ex[0].answer == m.layout.encode(q.answer)[:128]
    assert ex[0].context == m.layout.encode(samples[0].history.text)[-256:]
    batch = m.collate(ex[:2])
    for row in range(2):
        lab = batch["dec_labels"][row]
        assert lab[lab != -100].tolist() == ex[row].answer + [m.tokenizer.eos_token_id]
        codes = batch["dec_ids"][row][batch["dec_mask"][row].bool()].tolist()
        assert codes.count(D.SLOT) == m.layout.n_slots(ex[row].context) and codes.count(D.FT) == 1
    out = m(batch)
    assert set(out.stats) >= {"ft_loss"} and out.n_tokens == int((batch["dec_labels"] != -100).sum())
    with pytest.raises(ValueError, match="questions"):
        m.train_examples([Sample(History(id="t", text="no questions"), [])])


def test_reconstruction_bleu():
    assert D.reconstruction_bleu("the cat sat on the mat .", "the cat sat on the mat .") == pytest.approx(1.0)
    assert D.reconstruction_bleu("the cat sat on the mat", "dogs run") < 0.1
    assert D.reconstruction_bleu("abc", "") == 0.0


def test_slot_norm_rescales_slots_to_embedding_norm():
    m = make(slot_norm="embed")
    m.eval()
    slots, _ = m.compress(m.layout.encode("a few words to compress"))
    want = float(m.base.get_input_embeddings().weight.norm(dim=-1).mean())
    assert torch.allclose(slots.norm(dim=-1), torch.full((slots.shape[0],), want), rtol=1e-4)
    raw = make(slot_norm="none")
    raw.eval()
    assert not torch.allclose(raw.compress(raw.layout.encode("a few words"))[0].norm(dim=-1)[0], torch.tensor(want))
    with pytest.raises(ValueError, match="slot_norm"):
        make(slot_norm="bogus")


def test_configs_compose(repo):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(repo / "conf"), version_base=None):
        icae = compose("train", overrides=["method=icae"]).method
        ft = compose("train", overrides=["method=icae_finetune"]).method
        paper = compose("train", overrides=["method=icae_paper_pretrain"]).method
        paper_ft = compose("train", overrides=["method=icae_paper_finetune"]).method
    assert icae.name == "icae_pretrain" and icae.mode == "pretrain"
    assert ft.name == "icae_finetune" and ft.mode == "finetune" and ft.lora == icae.lora  # pretrain state loads
    assert (paper.mem_size, paper.compression_rate, paper.lora.r) == (128, 4, 128)
    assert list(paper.lora.target_modules) == ["q_proj", "v_proj"] and paper.slot_norm == "none"
    assert paper_ft.name == "icae_finetune" and paper_ft.mode == "finetune" and paper_ft.lora == paper.lora


SAMPLED = dict(objective_sampling=True, lm_ratio=0.5, context_tokens=16, lm_tokens=16, leave_tokens_for_lm=2)


def sampled_examples(m):
    text = "It was the best of times, it was the worst of times, it was the age of wisdom. " * 6
    ex = m.train_examples([Sample(History(id="t", text=text), [])])
    assert len(ex) >= 4 and all(len(e.continuation) > 2 for e in ex)
    return ex


def test_held_out_batches_draw_apart_from_the_training_draws():
    """Collating held-out batches (eval mode, as the loop's evaluate) takes no training draw, and a
    held-out batch draws the same objectives at every evaluation."""
    a, b = make(**SAMPLED), make(**SAMPLED)
    ex = sampled_examples(a)
    train = [a.collate(ex * 3)["dec_kind"].tolist() for _ in range(4)]
    held, seen = [], []
    for _ in range(4):
        b.eval()
        held.append(b.collate(ex * 3)["dec_kind"].tolist())
        b.train()
        seen.append(b.collate(ex * 3)["dec_kind"].tolist())
    assert seen == train
    assert all(h == held[0] for h in held) and set(held[0]) == {0, 1}


def test_ranks_draw_their_own_objectives_and_the_draws_round_trip():
    import json

    from ctxbench.training import checkpoint as ck

    m = make(**SAMPLED)
    ex = sampled_examples(m) * 4
    kinds = {}
    for rank in (0, 1):
        m.seed_rank(rank)
        kinds[rank] = m.collate(ex)["dec_kind"].tolist()
    assert kinds[0] != kinds[1]  # DDP ranks no longer draw the same objectives
    m.seed_rank(1)
    assert m.collate(ex)["dec_kind"].tolist() == kinds[1]
    saved = json.loads(json.dumps(m.rng_state()))  # through state.json
    want = m.collate(ex)["dec_kind"].tolist()
    m.seed_rank(0)
    ck.restore_method_rng("ckpt", {"rng": {"1": {"method": saved}}}, 1, m)
    assert m.collate(ex)["dec_kind"].tolist() == want
    with pytest.raises(ck.CheckpointError, match=r"state\.json: field rng\.1\.method cannot be restored"):
        ck.restore_method_rng("ckpt", {"rng": {"1": {"method": {"objective": [3, ["x"], None]}}}}, 1, m)
