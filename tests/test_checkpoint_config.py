"""A checkpoint carries its method and model config; ``eval checkpoint=DIR`` uses it and refuses contradictions."""
from __future__ import annotations

import json

import pytest
import torch

from ctxbench.training import checkpoint as ck

TRAINED_METHOD = {"mem_size": 4, "lora": {"r": 4}, "max_new_tokens": 32}
TINY = {"name": "tiny", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
        "intermediate_size": 64, "max_position_embeddings": 512, "seed": 0, "dtype": "float32",
        "attn_implementation": "eager", "gradient_checkpointing": False, "max_length": 512}


def compose_eval(repo, overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        return compose("eval", overrides=overrides)


def trained(repo, tmp_path, method="icae", model=TINY, **method_keys):
    """A checkpoint whose method.json is the composed method config with ``method_keys`` set."""
    from omegaconf import OmegaConf

    cfg = compose_eval(repo, [f"method={method}"])
    conf = OmegaConf.to_container(cfg.method, resolve=True)
    for k, v in {**TRAINED_METHOD, **method_keys}.items():
        conf[k] = {**conf[k], **v} if isinstance(v, dict) else v
    return ck.save_checkpoint(tmp_path / "run" / "checkpoints", 3, trainable={"w": torch.ones(2)},
                              method_config=conf, model_config=model, state={"model": model["name"]})


def apply(repo, ckpt, overrides):
    cfg = compose_eval(repo, overrides)
    return ck.apply_checkpoint_config(cfg, ckpt.parent.parent, overrides)


def test_saved_values_fill_keys_the_command_line_does_not_set(repo, tmp_path):
    c = trained(repo, tmp_path)
    cfg = apply(repo, c, ["method=icae", "dataset=locomo_sample"])
    assert cfg.method.mem_size == 4 and cfg.method.lora.r == 4  # the defaults are 16 and 8
    assert cfg.method.lora.target_modules == ["q_proj", "v_proj"]
    assert dict(cfg.model) == TINY  # the eval default (smollm2_135m) is replaced, not mixed in


def test_a_contradicting_override_names_key_and_both_values(repo, tmp_path):
    c = trained(repo, tmp_path)
    with pytest.raises(ck.CheckpointError) as e:
        apply(repo, c, ["method=icae", "method.mem_size=16", "method.lora.r=8"])
    msg = str(e.value)
    assert "\n" not in msg
    assert "method.mem_size=4 but the config says 16" in msg and "method.lora.r=4 but the config says 8" in msg
    assert "pass method.mem_size=4 method.lora.r=4" in msg and str(c.parent.parent) in msg


def test_agreeing_and_eval_only_overrides_are_kept(repo, tmp_path):
    c = trained(repo, tmp_path)
    cfg = apply(repo, c, ["method=icae", "method.mem_size=4", "method.max_new_tokens=5", "model.dtype=bfloat16"])
    assert cfg.method.mem_size == 4 and cfg.method.max_new_tokens == 5
    assert cfg.model.name == "tiny" and cfg.model.hidden_size == 32 and cfg.model.dtype == "bfloat16"


def test_another_method_or_model_is_refused(repo, tmp_path):
    c = trained(repo, tmp_path)
    with pytest.raises(ck.CheckpointError, match=r"trained with method=icae_pretrain but the config says "
                                                 r"method=ccm_merge \(pass method=icae_pretrain\)"):
        apply(repo, c, ["method=ccm_merge"])
    with pytest.raises(ck.CheckpointError, match=r"trained with model=tiny but the config says model=smollm2_135m"):
        apply(repo, c, ["method=icae", "model=smollm2_135m"])
    with pytest.raises(ck.CheckpointError, match=r"model.hidden_size=32 but the config says 64"):
        apply(repo, c, ["method=icae", "model=tiny", "model.hidden_size=64"])
    cfg = apply(repo, c, ["method=icae", "model=tiny"])  # the same model, named: its saved keys win
    assert cfg.model.hidden_size == 32


def test_hf_model_path_must_match(repo, tmp_path):
    saved = {"name": "hf", "path": "org/model-a", "label": None, "dtype": "bfloat16"}
    c = trained(repo, tmp_path, model=saved)
    with pytest.raises(ck.CheckpointError, match=r"model.path=org/model-a but the config says org/model-b"):
        apply(repo, c, ["method=icae", "model=hf", "model.path=org/model-b"])
    assert apply(repo, c, ["method=icae"]).model.path == "org/model-a"


def test_older_checkpoint_without_model_json_uses_the_model_name(repo, tmp_path):
    c = trained(repo, tmp_path)
    (c / "model.json").unlink()
    manifest = json.loads((c / "MANIFEST.json").read_text())
    del manifest["model.json"]
    (c / "MANIFEST.json").write_text(json.dumps(manifest))
    with pytest.raises(ck.CheckpointError, match="model=tiny but the config says model=smollm2_135m"):
        apply(repo, c, ["method=icae", "model=smollm2_135m"])


def test_missing_or_not_a_checkpoint_folder_is_named(repo, tmp_path):
    with pytest.raises(ck.CheckpointError, match=f"checkpoint '{tmp_path / 'nope'}' does not exist"):
        ck.apply_checkpoint_config(compose_eval(repo, ["method=icae"]), tmp_path / "nope", [])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ck.CheckpointError, match=r"empty'.*no trainable.safetensors and no checkpoints/step_\*/"):
        ck.apply_checkpoint_config(compose_eval(repo, ["method=icae"]), tmp_path / "empty", [])
    c = trained(repo, tmp_path)
    (c / "method.json").unlink()
    (c / "MANIFEST.json").unlink()
    (c / "trainable.safetensors").touch()
    with pytest.raises(ck.CheckpointError, match=r"step_0000003: file method.json is missing"):
        ck.apply_checkpoint_config(compose_eval(repo, ["method=icae"]), c, [])


def test_overridden_keys_reads_hydra_override_syntax():
    got = ck.overridden_keys(["method=icae", "+method.extra=1", "++model.dtype=bf16", "~method.lora.r",
                              "checkpoint=x", "methods.x=1"])
    assert got == {"method": {"", "extra", "lora.r"}, "model": {"dtype"}}


ICAE = ["method.context_tokens=32", "method.lm_tokens=16", "method.max_new_tokens=4"]


def test_eval_cli_uses_the_checkpoints_config(cli, tmp_path):
    """Trained with mem_size=4, evaluated without it: works (today: a tensor-size traceback); 8 fails early."""
    run, ev = tmp_path / "train", tmp_path / "eval"
    r = cli("train", "method=icae", "model=tiny", "method.mem_size=4", *ICAE, "dataset=text_sample",
            "trainer.max_steps=1", "trainer.progress=false", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    common = ["eval", "method=icae", "method.max_new_tokens=2", f"checkpoint={run}", "dataset=locomo_sample",
              "limit=1", "progress=false"]
    r = cli(*common, f"hydra.run.dir={ev}")
    assert r.returncode == 0, r.stderr[-2000:]
    conf = json.loads((ev / "results.json").read_text())["config"]
    assert conf["method"]["mem_size"] == 4 and conf["model"]["name"] == "tiny"
    empty_cache = tmp_path / "cache"
    r = cli(*common, "method.mem_size=8", f"hydra.run.dir={tmp_path / 'bad'}", env={"CTXBENCH_CACHE": str(empty_cache)})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        f"ctxbench: error: checkpoint {run} was trained with method.mem_size=4 but the config says 8 "
        f"(drop the override or pass method.mem_size=4)")
    assert not (empty_cache / "models").exists()  # refused before any model was built or loaded
    r = cli("eval", f"checkpoint={run}", "dataset=locomo_sample", "limit=1", "progress=false",
            f"hydra.run.dir={tmp_path / 'nomethod'}", env={"CTXBENCH_CACHE": str(empty_cache)})
    assert r.returncode == 2  # not a memory=full_context run that silently ignores the checkpoint
    assert r.stderr.strip().splitlines()[-1] == (
        f"ctxbench: error: checkpoint={run} is a trained method: pass method=icae_pretrain to evaluate it")
