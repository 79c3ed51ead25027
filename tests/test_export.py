"""``export``: a trained run as a plain-peft adapter + extras; loaded outside ctxbench it computes what ctxbench does."""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.training import checkpoint as ck
from ctxbench.export import load_export, read_extras
from ctxbench.models.loading import load_model
from ctxbench.core.registry import build
from ctxbench.config.compose import option_config

FAST = ["model=tiny", "trainer.progress=false", "trainer.max_steps=2", "trainer.save_every=2"]
ICAE_SMALL = ["method.mem_size=4", "method.compression_rate=4", "method.context_tokens=32", "method.lm_tokens=16"]
CCM_SMALL = ["method.n_tok=2", "method.step_tokens=16", "method.train_steps=3"]
IDS = torch.tensor([[1, 40, 41, 42, 60, 70, 80, 90, 100, 33, 34, 35]])


def train_and_export(cli, tmp_path, method, *extra):
    run, out = tmp_path / "run", tmp_path / "export"
    r = cli("train", f"method={method}", *FAST, *extra, f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("export", f"checkpoint={run}", f"out={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"exported {method} step 2 to {out}" in r.stdout
    return run, out


def from_checkpoint(run):
    """The ctxbench method as ``eval checkpoint=`` builds it: saved configs, then load_trained."""
    configs = ck.saved_configs(ck.resolve_checkpoint(run))
    method = build("method", OmegaConf.create(configs["method"]), bundle=load_model(option_config("model", configs["model"])))
    ck.load_trained(method, run)
    return method.eval()


def fresh_base(out):
    """The base model alone, loaded afresh from the export's model.json (tiny: the model built in code)."""
    return load_model(option_config("model", json.loads((out / "model.json").read_text()))).model.eval()


def test_lm_adapter_loads_with_plain_peft_and_matches(cli, tmp_path):
    from peft import PeftModel

    run, out = train_and_export(cli, tmp_path, "lm")
    assert {p.name for p in (out / "adapter").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    assert not (out / "extras.safetensors").exists()  # lm trains only its LoRA
    assert "PeftModel.from_pretrained" in (out / "README.md").read_text()
    with torch.no_grad():
        want = from_checkpoint(run).model(input_ids=IDS).logits
        base = fresh_base(out)
        plain = base(input_ids=IDS).logits
        got = PeftModel.from_pretrained(base, str(out / "adapter")).eval()(input_ids=IDS).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert (got - plain).abs().max() > 1e-3  # the adapter changes the model: the match is not the base's


def test_icae_adapter_and_memory_embeddings_give_the_same_slots(cli, tmp_path):
    from peft import PeftModel

    run, out = train_and_export(cli, tmp_path, "icae_pretrain", *ICAE_SMALL)
    trained = from_checkpoint(run)
    extras = read_extras(out)
    assert list(extras) == ["memory_embed"] and extras["memory_embed"].shape == (4 + 3, 64)
    ids = list(range(40, 40 + trained.layout.seg_len))  # one full segment
    want, _ = trained.compress(ids)
    # the encoder outside ctxbench: plain peft + the memory embeddings appended after the segment
    base = fresh_base(out)
    embed_norm = base.get_input_embeddings().weight.norm(dim=-1).mean()
    encoder = PeftModel.from_pretrained(base, str(out / "adapter")).eval()
    seq = torch.tensor([trained.layout.bos + ids])
    with torch.no_grad():
        embeds = torch.cat([encoder.get_input_embeddings()(seq), extras["memory_embed"][None, :4]], 1)
        hidden = encoder.get_base_model().model(inputs_embeds=embeds).last_hidden_state[0, -4:]
    got = hidden * (embed_norm / hidden.norm(dim=-1, keepdim=True))  # slot_norm: embed
    assert torch.allclose(got, want, atol=1e-5)
    untrained = build("method", trained.cfg, bundle=load_model(option_config("model", json.loads((out / "model.json")
                                                                                          .read_text()))))
    assert not torch.allclose(untrained.eval().compress(ids)[0], want, atol=1e-4)  # training moved the slots
    # and ctxbench's own loader rebuilds the same method from the export
    again = load_export(out)
    assert torch.allclose(again.compress(ids)[0], want, atol=1e-6)


def test_ccm_extras_round_trip_into_a_built_method(cli, tmp_path):
    from ctxbench.methods.ccm import Memory

    run, out = train_and_export(cli, tmp_path, "ccm_merge", *CCM_SMALL)
    assert not (out / "adapter").exists()  # conditional LoRA: not a peft adapter, said in the README
    readme = (out / "README.md").read_text()
    assert "No `adapter/` folder" in readme and "`comp_embeddings` | [2, 64]" in readme
    extras = read_extras(out)
    assert any(k.endswith("q_proj.lora_A") for k in extras) and extras["comp_embeddings"].shape == (2, 64)

    def memory_and_logits(m):
        mem = Memory()
        for step in ([40, 41, 42, 43, 44], [50, 51, 52, 53]):
            mem, _ = m.compress_step(mem, step)
        return mem, m.read(mem, [60, 61, 62])[0]

    want_mem, want = memory_and_logits(from_checkpoint(run))
    got_mem, got = memory_and_logits(load_export(out))
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_mem.keys + got_mem.values, want_mem.keys + want_mem.values))
    untrained = build("method", OmegaConf.create(json.loads((out / "method.json").read_text())),
                      bundle=load_model(option_config("model", json.loads((out / "model.json").read_text()))))
    assert not torch.allclose(memory_and_logits(untrained.eval())[1], want, atol=1e-5)


def test_missing_or_damaged_checkpoint_is_one_line(cli, tmp_path):
    r = cli("export", f"checkpoint={tmp_path / 'nope'}")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "does not exist" in r.stderr
    c = ck.save_checkpoint(tmp_path / "run" / "checkpoints", 1, trainable={"w": torch.ones(3)},
                           method_config={"name": "lm"}, model_config={"name": "tiny"})
    (c / "trainable.safetensors").write_bytes(b"garbage")
    r = cli("export", f"checkpoint={tmp_path / 'run'}")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "trainable.safetensors is truncated" in r.stderr or "corrupt" in r.stderr
    r = cli("export")
    assert r.returncode == 2 and "checkpoint=DIR is required" in r.stderr


def test_out_folder_that_is_not_an_export_is_refused(tmp_path):
    from ctxbench.export import ExportError, check_export, check_target

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="is not an earlier export"):
        check_target(tmp_path / "mine")
    with pytest.raises(ExportError, match="is not a ctxbench export"):
        check_export(tmp_path / "mine")
    check_target(tmp_path / "new")  # new or empty folders are fine
