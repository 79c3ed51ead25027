"""ICAE: λ weights every batch, the reference segment layout, the decoder runs with LoRA off, the slots
are the states AT the memory tokens, and the eval-task protocol (score_continuation, reconstruct_ids)."""
from __future__ import annotations

import pytest
import torch

from ctxbench.methods import icae_data as D
from ctxbench.models.loading import load_model
from method_cases import build_case, ids
from omegaconf import OmegaConf
from ctxbench.config.compose import option_config


def ae_batch(m):
    ctx = ids(48)
    return m.collate([D.Example(context=ctx), D.Example(context=ids(40, 1))])  # AE rows only


def grads(m, batch) -> torch.Tensor:
    m.zero_grad()
    m(batch).loss.backward()
    return torch.cat([p.grad.flatten() for p in m.parameters() if p.requires_grad and p.grad is not None])


def test_lambda_weights_a_batch_holding_one_objective():
    m, _ = build_case("icae_pretrain", torch.float32)
    m.train()
    batch = ae_batch(m)
    m.lambda_ae = 0.0
    g0 = grads(m, batch)
    assert float(m(batch).loss) == 0.0 and float(g0.abs().max()) == 0.0   # λ = 0: reconstruction trains nothing
    m.lambda_ae = 0.3
    l3 = float(m(batch).loss)
    m.lambda_ae = 0.9
    l9 = float(m(batch).loss)
    assert l9 == pytest.approx(3 * l3, rel=1e-5)                          # the AE loss, weighted by λ
    m.lambda_ae = 0.5
    both = m.collate([D.Example(context=ids(48), continuation=ids(20, 2))])
    out = m(both)
    assert float(out.loss) == pytest.approx(0.5 * out.stats["ae_loss"] + 0.5 * out.stats["lm_loss"], rel=1e-5)


def test_reference_layout_has_the_start_token_once_and_none_in_decoder_rows():
    tok = load_model(option_config("model", {"name": "tiny"})).tokenizer
    base = {"name": "icae_pretrain", "mem_size": 4, "compression_rate": 4, "add_bos": True}
    ours = D.Layout(tok, option_config("method", base))
    ref = D.Layout(tok, option_config("method", {**base, "segment_layout": "reference"}))
    ctx, bos = ids(40), tok.bos_token_id
    assert [s[0] for s in ours.segments(ctx)] == [bos] * 3
    segs = ref.segments(ctx)
    assert segs[0][0] == bos and all(bos not in s for s in segs[1:]) and sum(map(len, segs)) == 41
    assert ours.ae(ctx)[0][0] == bos and bos not in ref.ae(ctx)[0] and bos not in ref.lm(ctx, ids(12))[0]


def test_decoder_runs_with_the_adapter_off():
    m, _ = build_case("icae_pretrain", torch.float32)  # LoRA weights made non-zero
    m.eval()
    plain = load_model(option_config("model", {"name": "tiny", "dtype": "float32"})).model  # the same base, no LoRA
    codes = ids(12, 3)
    got = m.decoder_logits(codes, torch.zeros(0, m.memory_embed.shape[1]))
    want = plain(input_ids=torch.tensor([codes])).logits[0]
    assert torch.allclose(got, want, atol=1e-5)
    with torch.no_grad():  # power: the encoder (adapter on) computes something else on the same tokens
        enc = m.base.get_output_embeddings()(m.inner(input_ids=torch.tensor([codes])).last_hidden_state)[0]
    assert not torch.allclose(enc, want, atol=1e-3)
    with m.plain_lm() as lm:
        assert torch.allclose(lm(input_ids=torch.tensor([codes])).logits[0], want, atol=1e-5)


def test_slots_are_the_last_layer_states_at_the_memory_positions():
    m, _ = build_case("icae_pretrain", torch.float32)
    m.eval()
    m.slot_norm = "none"
    seg = ids(16, 4)
    slots = m.encode_segments(torch.tensor([seg]), torch.tensor([16]))[0]
    with torch.no_grad():
        emb = m.base.get_input_embeddings()(torch.tensor([seg]))
        full = torch.cat([emb, m.memory_embed[: m.mem_size].unsqueeze(0)], dim=1)
        hidden = m.inner(inputs_embeds=full).last_hidden_state[0]   # adapter on: the encoder
    assert torch.allclose(slots, hidden[16:16 + m.mem_size], atol=1e-5)
    assert not torch.allclose(slots, hidden[15:15 + m.mem_size], atol=1e-3)  # one position early
    assert not torch.allclose(slots[:-1], hidden[17:16 + m.mem_size], atol=1e-3)  # one position late


def test_score_continuation_reads_the_slots_and_reconstruct_ids_decodes():
    m, _ = build_case("icae_pretrain", torch.float32)
    m.eval()
    ctx, tgt = ids(40), ids(10, 5)
    s = m.score_continuation([ctx[:20], ctx[20:]], tgt)
    assert s.tokens == 10 and s.context_tokens == 40 and s.memory_slots == m.memory_slots(40) == 3 * m.mem_size
    slots, _ = m.compress(ctx)
    codes = m.layout.row_bos + [D.SLOT] * slots.shape[0] + [D.LM] + tgt
    logits = m.decoder_logits(codes, slots)[-11:-1]
    want = float(torch.nn.functional.cross_entropy(logits, torch.tensor(tgt), reduction="sum"))
    assert s.nll == pytest.approx(want, rel=1e-5)
    other = m.score_continuation([ids(40, 9)], tgt)
    assert other.nll != pytest.approx(s.nll, rel=1e-4)               # the target depends on the context's slots
    out = m.reconstruct_ids(ctx, max_new_tokens=5)
    assert isinstance(out, list) and len(out) <= 5 and all(isinstance(t, int) for t in out)


def test_icae_eval_is_an_alias_of_eval_task_reconstruction(tmp_path, shared_data):
    import json

    from ctxbench.methods.icae_eval import eval_args, main

    args = eval_args(["--text", str(shared_data / "tinyshakespeare.txt"), "--model", "tiny", "--n", "2",
                      "--tokens", "16", "--out", str(tmp_path / "r"), "mem_size=4", "max_new_tokens=4"])
    assert args[:3] == ["eval", "task=reconstruction", "method=icae_pretrain"] and "method.mem_size=4" in args
    main(["--text", str(shared_data / "tinyshakespeare.txt"), "--model", "tiny", "--n", "2", "--tokens", "16",
          "--out", str(tmp_path / "r"), "mem_size=4", "compression_rate=4"])
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    (row,) = res["rows"]
    assert res["task"] == "reconstruction" and row["n"] == 2 and row["memory_slots"] == 4
    assert 0.0 <= row["bleu4"] <= 1.0 and (tmp_path / "r" / "results.md").exists()
