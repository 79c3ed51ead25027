"""``python -m ctxbench.methods.icae_eval``: an alias of ``eval task=reconstruction`` (the one evaluator).

``python -m ctxbench.methods.icae_eval --text FILE [--checkpoint RUN] [--model NAME] [--n N] [--tokens T]
[--skip-tokens S] [--out DIR] [method overrides, e.g. mem_size=8]`` runs::

    python -m ctxbench eval task=reconstruction method=icae_pretrain [checkpoint=RUN] model=NAME \\
        dataset=text dataset.path=FILE task.lengths=[T] task.windows=N task.skip_tokens=S hydra.run.dir=DIR

which decodes N passages of T tokens (from token S on) back from their slots and writes
results.json / results.md / records.jsonl (BLEU-4, exact match, token accuracy) in DIR.
"""
from __future__ import annotations

import time
from typing import Any


def eval_args(argv: list[str] | None = None) -> list[str]:
    """The ``eval`` command line this alias stands for."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True)
    ap.add_argument("--checkpoint")
    ap.add_argument("--model", default="smollm2_135m")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--skip-tokens", type=int, default=0)
    ap.add_argument("--out", default=f"outputs/eval/{time.strftime('%Y-%m-%d_%H-%M-%S')}_icae_reconstruction")
    ap.add_argument("overrides", nargs="*", help="method config overrides, e.g. mem_size=8")
    a = ap.parse_args(argv)
    args = ["eval", "task=reconstruction", "method=icae_pretrain", f"model={a.model}", "dataset=text",
            f"dataset.path={a.text}", f"task.lengths=[{a.tokens}]", f"task.windows={a.n}",
            f"task.skip_tokens={a.skip_tokens}", f"hydra.run.dir={a.out}"]
    if a.checkpoint:
        args.append(f"checkpoint={a.checkpoint}")
    return args + [o if o.startswith(("method.", "+", "~")) else f"method.{o}" for o in a.overrides]


def main(argv: list[str] | None = None) -> Any:
    from ctxbench.__main__ import main as cli

    return cli(eval_args(argv))


if __name__ == "__main__":
    main()
