"""ICAE autoencoding evaluation: held-out text → slots → greedy reconstruction, BLEU and AE loss.

``python -m ctxbench.methods.icae_eval --text FILE [--checkpoint RUN] [--model NAME] [key=value ...]``
prints the mean reconstruction BLEU-4 and AE loss of an untrained (no checkpoint) or trained ICAE.
"""
from __future__ import annotations

from typing import Any

import torch

from ..paths import conf_dir as package_conf_dir
from . import icae_data as D


@torch.no_grad()
def autoencoding_eval(method: Any, texts: list[str], max_tokens: int) -> dict[str, Any]:
    """Mean reconstruction BLEU-4 and AE loss (teacher-forced, per token) over ``texts``, each cut
    to its first ``max_tokens`` tokens."""
    from tqdm.auto import tqdm

    method.eval()
    bleus, losses, rows = [], [], []
    for text in tqdm(texts, desc="icae ae-eval", leave=False):
        ids = method.layout.encode(text)[:max_tokens]
        ref = method.tokenizer.decode(ids)
        hyp = method.reconstruct(ref, max_new_tokens=len(ids) + 8)
        bleus.append(D.reconstruction_bleu(ref, hyp))
        batch = D.collate([D.Example(context=ids)], method.layout, "pretrain", int(method.tokenizer.pad_token_id))
        batch = {k: v.to(method.device) for k, v in batch.items()}
        losses.append(float(method(batch).stats["ae_loss"]))
        rows.append({"reference": ref, "reconstruction": hyp, "bleu": bleus[-1], "ae_loss": losses[-1]})
    return {"bleu": sum(bleus) / len(bleus), "ae_loss": sum(losses) / len(losses), "n": len(texts), "rows": rows}


def held_out_windows(text: str, tokenizer: Any, n: int, tokens: int, skip_tokens: int) -> list[str]:
    """``n`` windows of ``tokens`` tokens from the end of ``text``, after its first ``skip_tokens``
    (the part a pretraining run with ``max_examples`` read)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tail = ids[skip_tokens:]
    if len(tail) < n * tokens:
        raise ValueError(f"only {len(tail)} tokens after the first {skip_tokens}: need {n * tokens}")
    return [tokenizer.decode(tail[-(i + 1) * tokens : len(tail) - i * tokens]) for i in range(n)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m ctxbench.methods.icae_eval --text FILE [--checkpoint RUN] [--model NAME] [key=value ...]``:
    reconstruction BLEU / AE loss on held-out windows, untrained (no checkpoint) or trained."""
    import argparse
    import json
    from pathlib import Path

    from omegaconf import OmegaConf

    from ..checkpoint import load_trained, resolve_checkpoint
    from ..models.loading import load_model

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--text", required=True)
    ap.add_argument("--checkpoint")
    ap.add_argument("--model", default="smollm2_135m")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--skip-tokens", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("overrides", nargs="*", help="method config overrides, e.g. mem_size=8")
    a = ap.parse_args(argv)
    conf_dir = package_conf_dir()
    if a.checkpoint:
        cfg = OmegaConf.create(json.loads((resolve_checkpoint(a.checkpoint) / "method.json").read_text()))
    else:
        cfg = OmegaConf.load(conf_dir / "method" / "icae_pretrain.yaml")
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(a.overrides))
    model_cfg = OmegaConf.load(conf_dir / "model" / f"{a.model}.yaml")
    from .icae import ICAEPretrain

    method = ICAEPretrain(cfg, load_model(model_cfg))
    if a.checkpoint:
        load_trained(method, a.checkpoint)
    texts = held_out_windows(Path(a.text).read_text(encoding="utf-8"), method.tokenizer, a.n, a.tokens, a.skip_tokens)
    res = autoencoding_eval(method, texts, a.tokens)
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
