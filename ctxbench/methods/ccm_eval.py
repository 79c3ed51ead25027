"""CCM's comparison table: next-step loss with compressed memory vs no memory vs full context.

``python -m ctxbench.methods.ccm_eval --run concat=DIR --run merge=DIR --data FILE --from-char N`` is an
alias of the one evaluator: it runs ``python -m ctxbench eval task=perplexity method=ccm_<mode>
checkpoint=DIR`` once per ``--run`` (run folders under ``--out``), each scoring the ``step_tokens``
tokens after ``steps`` chunks of memory beside the base model with the full context and none.
:func:`eval_args` builds those command lines.

:func:`compare` / :func:`markdown` remain as library functions for the same measure on models in hand
(the CCM system tests use them): for each window of ``steps + 1`` chunks the loss is taken on the
same tokens (every token of the last chunk after its first, predicted inside the chunk):

- ``no_context``: the base model reads the last chunk alone;
- ``ccm_<mode>``: memory of the first ``steps`` chunks (parallel form, equal to recurrent
  compression), then the last chunk;
- ``full_context``: the base model reads all chunks in one sequence.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch



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
    from ctxbench.core.markdown_table import md_table

    head = (f"next-step loss after {steps} steps of {step_tokens} tokens "
            f"(loss on the following chunk; memory = KV kept for the earlier steps)\n\n")
    cells = [[r["system"], f"{r['loss']:.3f}", f"{r['ppl']:.1f}", r["slots"], f"{r['kv_entries']:,}", f"{r['kv_bytes']:,}"]
             for r in rows]
    return head + md_table(["system", "loss", "ppl", "memory slots", "KV entries", "KV bytes"], cells) + "\n"


def eval_args(argv: list[str] | None = None) -> list[list[str]]:
    """The ``eval task=perplexity`` command lines this alias stands for: one per ``--run``, on the text
    from ``--from-char`` (written to ``--out``/held_out.txt), contexts of ``steps × step_tokens`` tokens,
    the next ``step_tokens`` scored, beside the base model with the full context and none."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], help="LABEL=RUN_DIR of a trained ccm_concat/ccm_merge "
                    "(LABEL=untrained:concat|merge for an untrained one)")
    ap.add_argument("--model", default="smollm2_135m", help="conf/model/<name>.yaml")
    ap.add_argument("--data", required=True, help="a text file")
    ap.add_argument("--from-char", type=int, default=0, help="evaluate on the text from this character (held out)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-tokens", type=int, default=64)
    ap.add_argument("--n", type=int, default=16, help="evaluation windows")
    ap.add_argument("--out", default="outputs/eval/ccm_eval", help="run folders go here, one per --run")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    held = out / "held_out.txt"
    held.write_text(Path(a.data).read_text(encoding="utf-8")[a.from_char:], encoding="utf-8")
    cmds = []
    for spec in a.run:
        label, _, where = spec.partition("=")
        method = f"ccm_{where.split(':', 1)[1]}" if where.startswith("untrained:") else None
        cmd = ["eval", "task=perplexity", f"model={a.model}", "dataset=text", f"dataset.path={held}",
               f"task.lengths=[{a.steps * a.step_tokens}]", f"task.target_tokens={a.step_tokens}",
               f"task.windows={a.n}", f"method.step_tokens={a.step_tokens}", f"hydra.run.dir={out / label}"]
        if method:
            cmds.append([cmd[0], f"method={method}", *cmd[1:]])
        else:
            saved = json.loads((Path(where) / "method.json").read_text()) if (Path(where) / "method.json").exists() \
                else None
            name = (saved or {}).get("name") or ("ccm_merge" if "merge" in label else "ccm_concat")
            cmds.append([cmd[0], f"method={name}", f"checkpoint={where}", *cmd[1:]])
    return cmds


def main(argv: list[str] | None = None) -> None:
    """An alias of ``python -m ctxbench eval task=perplexity method=ccm_*`` (the one evaluator)."""
    from ctxbench.__main__ import main as cli

    for cmd in eval_args(argv):
        cli(cmd)


if __name__ == "__main__":
    main()
