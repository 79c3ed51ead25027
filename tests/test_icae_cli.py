"""ICAE through the CLI on the tiny model: pretrain → fine-tune from its checkpoint → eval on PwC."""
from __future__ import annotations

import json

from safetensors.torch import load_file

from ctxbench.training import checkpoint as ck

SMALL = ["model=tiny", "method.mem_size=4", "method.compression_rate=4", "method.context_tokens=32",
         "method.lm_tokens=16", "method.max_new_tokens=4", "method.max_context_tokens=64"]


def test_pretrain_finetune_eval(cli, tmp_path, shared_data):
    pwc = f"dataset.path={shared_data / 'pwc_dev_icae_v2.jsonl'}"
    pre, ft, ev = tmp_path / "pre", tmp_path / "ft", tmp_path / "eval"
    r = cli("train", "method=icae", *SMALL, "dataset=text_sample", "trainer.max_steps=3", "trainer.progress=false",
            f"hydra.run.dir={pre}")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (pre / "metrics.jsonl").read_text().splitlines()]
    assert all({"ae_loss", "lm_loss"} <= set(x) for x in rows if "loss" in x)
    w_pre = load_file(str(ck.resolve_checkpoint(pre) / "trainable.safetensors"))
    assert "memory_embed" in w_pre and any(".lora_A." in k for k in w_pre)

    r = cli("train", "method=icae_finetune", *SMALL, "dataset=pwc", pwc, f"checkpoint={pre}", "trainer.max_steps=2",
            "trainer.progress=false", f"hydra.run.dir={ft}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "initialised trainable weights from" in r.stdout + r.stderr
    rows = [json.loads(x) for x in (ft / "metrics.jsonl").read_text().splitlines()]
    assert all("ft_loss" in x for x in rows if "loss" in x)
    w_ft = load_file(str(ck.resolve_checkpoint(ft) / "trainable.safetensors"))
    assert w_ft.keys() == w_pre.keys()

    r = cli("eval", "method=icae_finetune", *SMALL, f"checkpoint={ft}", "dataset=pwc", pwc, "limit=2",
            "progress=false", f"hydra.run.dir={ev}")
    assert r.returncode == 0, r.stderr[-2000:]
    preds = [json.loads(x) for x in (ev / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 2
    u = preds[0]["usage"]
    assert u["held_soft_slots"] == u["memory_items"] > 0 and u["held_soft_slots"] % 4 == 0
    assert u["extra"]["compression_rate"] > 1
    assert u["extra"]["decoder_prompt_tokens"] == u["answer_prompt_tokens"] + u["held_soft_slots"]
    assert preds[0]["construction"]["calls"] == u["held_soft_slots"] // 4  # one encoder pass per segment
