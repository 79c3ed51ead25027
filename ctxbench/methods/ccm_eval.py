"""CCM's comparison table: next-step loss with compressed memory vs no memory vs full context, and
the memory each keeps (KV slots, entries, bytes) — the shape of the CCM paper's tables.

For each evaluation window of ``steps + 1`` chunks of ``step_tokens`` tokens the loss is taken on
the same tokens (every token of the last chunk after its first, predicted inside the chunk):

- ``no_context``: the base model reads the last chunk alone;
- ``ccm_<mode>`` (each trained run given): memory of the first ``steps`` chunks (parallel form,
  equal to recurrent compression), then the last chunk;
- ``full_context``: the base model reads all chunks in one sequence.

``python -m ctxbench.methods.ccm_eval --run concat=DIR --run merge=DIR --data FILE --from-char N``
prints a markdown table (and writes JSON with ``--out``). :func:`compare` is the function behind it.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch

from ..paths import conf_dir as package_conf_dir


def eval_windows(tokens: list[int], steps: int, step_tokens: int, n: int) -> list[list[list[int]]]:
    """Up to ``n`` non-overlapping windows of ``steps + 1`` chunks."""
    span = (steps + 1) * step_tokens
    out = []
    for i in range(0, len(tokens) - span + 1, span):
        w = tokens[i:i + span]
        out.append([w[j:j + step_tokens] for j in range(0, span, step_tokens)])
        if len(out) >= n:
            break
    return out


def kv_size(model: Any, slots: int, dtype_bytes: int | None = None) -> dict[str, int]:
    """KV entries (vectors: slots × layers × kv-heads × 2) and bytes for ``slots`` positions."""
    c = model.config
    layers, kvh = int(c.num_hidden_layers), int(getattr(c, "num_key_value_heads", c.num_attention_heads))
    hd = int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
    b = dtype_bytes or next(model.parameters()).element_size()
    entries = slots * layers * kvh * 2
    return {"slots": slots, "kv_entries": entries, "kv_bytes": entries * hd * b}


@torch.no_grad()
def _base_loss(model: Any, ids: list[int], first_scored: int) -> tuple[float, int]:
    """Summed NLL of tokens ``ids[first_scored+1:]`` each predicted from everything before it."""
    x = torch.tensor([ids], device=next(model.parameters()).device)
    logits = model(input_ids=x).logits[0, first_scored:-1].float()
    tgt = x[0, first_scored + 1:]
    return float(torch.nn.functional.cross_entropy(logits, tgt, reduction="sum")), int(tgt.numel())


@torch.no_grad()
def _ccm_loss(method: Any, window: list[list[int]]) -> tuple[float, int]:
    last = window[-1]
    lay = method.layout(window[:-1], last, loss_steps_from=len(window) + 1)
    batch = method.collate([lay])
    batch = {k: v.to(method.device) for k, v in batch.items()}
    h = method.parallel_hidden(batch)
    sel = batch["labels"] != -100
    logits = method.model.get_output_embeddings()(h[sel]).float()
    return float(torch.nn.functional.cross_entropy(logits, batch["labels"][sel], reduction="sum")), int(sel.sum())


def compare(base_model: Any, methods: dict[str, Any], tokens: list[int], steps: int, step_tokens: int,
            n: int) -> list[dict[str, Any]]:
    """Rows {system, loss, ppl, slots, kv_entries, kv_bytes, tokens} over ``n`` windows of ``tokens``.

    ``base_model`` must compute the plain base model (for CCM methods, their model with the gate
    off is exactly that). ``methods`` maps a label (e.g. ``ccm_merge``) to a built, trained CCM.
    """
    from tqdm.auto import tqdm

    windows = eval_windows(tokens, steps, step_tokens, n)
    if not windows:
        raise ValueError(f"text too short for one window of {steps + 1} × {step_tokens} tokens")
    base_model.eval()
    rows: list[dict[str, Any]] = []

    def add(system: str, fn, slots: int) -> None:
        tot, cnt = 0.0, 0
        for w in tqdm(windows, desc=system, leave=False):
            s, c = fn(w)
            tot, cnt = tot + s, cnt + c
        loss = tot / cnt
        rows.append({"system": system, "loss": loss, "ppl": math.exp(loss), "tokens": cnt,
                     **kv_size(base_model, slots)})

    add("no_context", lambda w: _base_loss(base_model, w[-1], 0), 0)
    for label, m in methods.items():
        m.eval()
        slots = m.n_tok * (steps if m.mode == "concat" else 1)
        add(label, lambda w, m=m: _ccm_loss(m, w), slots)
    add("full_context", lambda w: _base_loss(base_model, sum(w, []), steps * step_tokens), steps * step_tokens)
    return rows


def markdown(rows: list[dict[str, Any]], steps: int, step_tokens: int) -> str:
    head = (f"next-step loss after {steps} steps of {step_tokens} tokens "
            f"(loss on the following chunk; memory = KV kept for the earlier steps)\n\n"
            "| system | loss | ppl | memory slots | KV entries | KV bytes |\n|---|---:|---:|---:|---:|---:|\n")
    return head + "".join(f"| {r['system']} | {r['loss']:.3f} | {r['ppl']:.1f} | {r['slots']} | {r['kv_entries']:,} | "
                          f"{r['kv_bytes']:,} |\n" for r in rows)


def main(argv: list[str] | None = None) -> None:
    from omegaconf import OmegaConf

    from .. import checkpoint as ckpt_mod
    from ..models.loading import load_model
    from ..registry import build

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], help="LABEL=RUN_DIR of a trained ccm_concat/ccm_merge "
                    "(LABEL=untrained:concat|merge for an untrained one)")
    ap.add_argument("--model", default="smollm2_135m", help="conf/model/<name>.yaml")
    ap.add_argument("--data", required=True, help="a text file")
    ap.add_argument("--from-char", type=int, default=0, help="evaluate on the text from this character (held out)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-tokens", type=int, default=None, help="default: the runs' method.step_tokens")
    ap.add_argument("--n", type=int, default=16, help="evaluation windows")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)

    conf_dir = package_conf_dir()
    model_cfg = OmegaConf.load(conf_dir / "model" / f"{args.model}.yaml")
    methods: dict[str, Any] = {}
    step_tokens = args.step_tokens
    base = None
    for spec in args.run:
        label, _, where = spec.partition("=")
        if where.startswith("untrained:"):
            cfg = OmegaConf.load(conf_dir / "method" / f"ccm_{where.split(':', 1)[1]}.yaml")
        else:
            ck = ckpt_mod.resolve_checkpoint(where)
            cfg = OmegaConf.create(json.loads((ck / "method.json").read_text()))
        m = build("method", cfg, bundle=load_model(model_cfg))
        if not where.startswith("untrained:"):
            ckpt_mod.load_trained(m, where)
        methods[label] = m
        step_tokens = step_tokens or int(cfg.get("step_tokens", 64))
        base = base or m.model
    base = base if base is not None else load_model(model_cfg).model  # CCM's model with the gate off = base model
    step_tokens = step_tokens or 64
    text = Path(args.data).read_text(encoding="utf-8")[args.from_char:]
    tok = load_model(model_cfg).tokenizer
    tokens = tok(text, add_special_tokens=False)["input_ids"]
    rows = compare(base, methods, tokens, args.steps, step_tokens, args.n)
    print(markdown(rows, args.steps, step_tokens))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
