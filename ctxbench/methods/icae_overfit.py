"""``python -m ctxbench.methods.icae_overfit``: ICAE autoencodes on real weights. Overfit 2 passages of 64
tokens into 16 slots each on the packaged SmolLM2 (conf/experiment/icae_overfit.yaml), then decode them
back: the passages trained on, and as many held out.

``python -m ctxbench.methods.icae_overfit [--text FILE] [--passages N] [--out DIR] [-- train overrides]``
(defaults: ../shared/data/tinyshakespeare.txt, 2, outputs/icae_overfit) runs, in this process::

    python -m ctxbench train experiment=icae_overfit dataset.path=FILE hydra.run.dir=DIR/train \\
        method.max_examples=N trainer.resume=auto [train overrides, e.g. trainer.max_steps=600]
    python -m ctxbench eval task=reconstruction method=icae checkpoint=DIR/train dataset=text \\
        dataset.path=FILE dataset.max_chars=40000 task.lengths=[64] task.windows=N task.extra_tokens=0 \\
        hydra.run.dir=DIR/trained_on                                  # the N trained on: tokens 0..64N-1
    ... task.skip_tokens=4096 hydra.run.dir=DIR/held_out              # N held out: from token 4096

and prints the two reconstruction tables (BLEU-4, exact match, token accuracy ± SE); reruns resume.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxbench.__main__ import split_at_dashes


def commands(argv: list[str] | None = None) -> tuple[Path, list[list[str]]]:
    """The output folder and the three CLI command lines (train, the trained-on eval, the held-out eval)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, extra = split_at_dashes(argv)
    ap = argparse.ArgumentParser(prog="python -m ctxbench.methods.icae_overfit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="a .txt corpus")
    ap.add_argument("--passages", type=int, default=2, help="passages trained on and decoded back; as many held out")
    ap.add_argument("--out", default="outputs/icae_overfit")
    a = ap.parse_args(argv)
    out, n = Path(a.out), a.passages
    train = ["train", "experiment=icae_overfit", f"dataset.path={a.text}", f"hydra.run.dir={out}/train",
             f"method.max_examples={n}", "trainer.resume=auto", *extra]
    ev = ["eval", "task=reconstruction", "method=icae", f"checkpoint={out}/train", "dataset=text",
          f"dataset.path={a.text}", "dataset.max_chars=40000", "task.lengths=[64]", f"task.windows={n}",
          "task.extra_tokens=0"]
    return out, [train, [*ev, f"hydra.run.dir={out}/trained_on"],
                 [*ev, "task.skip_tokens=4096", f"hydra.run.dir={out}/held_out"]]


def main(argv: list[str] | None = None) -> int:
    from ctxbench.__main__ import main as cli

    out, cmds = commands(argv)
    for cmd in cmds:
        try:
            cli(cmd)
        except SystemExit as e:  # the CLI reports a user error in one line and exits non-zero
            if e.code not in (0, None):
                print(f"ctxbench.methods.icae_overfit: {cmd[0]} failed (exit {e.code})", file=sys.stderr)
                return e.code if isinstance(e.code, int) else 1
    for d in ("trained_on", "held_out"):
        print(f"== {d}")
        print((out / d / "results.md").read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
