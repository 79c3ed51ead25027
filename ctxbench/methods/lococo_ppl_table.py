"""``python -m ctxbench.methods.lococo_ppl_table``: perplexity and memory of fixed-cache methods on long
text: full cache, StreamingLLM, H2O, LoCoCo, SnapKV, PyramidKV.

A thin alias of the one evaluator: each method is one ``python -m ctxbench eval task=perplexity
task.score=stream`` run (its own process, so peak-RSS numbers do not inherit another method's heap;
its own run folder under ``--out/runs/``, which resumes and is bound to its config), over the first
``max(lengths)`` tokens of a held-out text, segment by segment (B = segment_len) with M = mem_size
cache slots; perplexity, KV bytes held and peak resident memory after the first 1k, 2k, ... tokens
(the prefix a shorter text would be) come from each run's results.json; this module only picks the
held-out slice, checks checkpoints and puts the rows in one table and a plot.

    python -m ctxbench.methods.lococo_ppl_table --checkpoint outputs/lococo/calib_smollm2_B64_M128 \
        --out outputs/lococo/ppl_table

The reference rows (λ unclamped, no local window, as VITA-Group/LoCoCo) read a second calibration,
trained with ``method.clamp_lambda=false method.local_len=0``, passed as ``--ref-checkpoint``.

Writes ``results.json``, ``table.md`` and ``lococo_ppl_memory.png`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# label → (method config, the calibration it reads: None | "checkpoint" | "ref_checkpoint", method overrides)
REFERENCE = {"clamp_lambda": False, "local_len": 0}  # VITA-Group/LoCoCo: λ free, no local window
METHODS = {
    "full_cache": ("full_cache", None, {}),
    "streamingllm": ("streamingllm", None, {}),
    "h2o": ("h2o", None, {}),
    # LoCoCo's selection alone (λ = 0: heavy hitters + local window + top remaining slots, no mixing),
    # so the table shows what the learned convolution adds on top of the rule it starts from
    "lococo (drop, λ=0)": ("lococo", None, {"normalizer_init": 0.0}),
    "lococo (init)": ("lococo", None, {}),
    "lococo (calibrated)": ("lococo", "checkpoint", {}),
    # the reference's setting, calibrated the same way (--ref-checkpoint)
    "lococo reference (calibrated)": ("lococo", "ref_checkpoint", REFERENCE),
    # question-agnostic on a text (no question): the last segment's window votes at every overflow
    "snapkv": ("snapkv", None, {}),
    "pyramidkv": ("pyramidkv", None, {}),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ctxbench.methods.lococo_ppl_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2_135m", help="a conf/model/<name>.yaml")
    ap.add_argument("--text", default="../shared/data/tinyshakespeare.txt")
    ap.add_argument("--tail-chars", type=int, default=40000,
                    help="evaluate on the last N characters (calibration used the file's start)")
    ap.add_argument("--start-char", type=int, default=None,
                    help="evaluate on the text from this character instead of the tail (another held-out slice)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--table-length", type=int, default=4096, help="length of the perplexity table")
    ap.add_argument("--segment-len", type=int, default=64)
    ap.add_argument("--mem-size", type=int, default=128)
    ap.add_argument("--checkpoint", default=None, help="a `train method=lococo` run folder (or checkpoint)")
    ap.add_argument("--ref-checkpoint", default=None,
                    help="a `train method=lococo method.clamp_lambda=false method.local_len=0` run (the reference rows)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), help=f"labels among {list(METHODS)}")
    ap.add_argument("--out", default=f"outputs/lococo/ppl_{time.strftime('%Y%m%d_%H%M%S')}")
    ap.add_argument("--fresh", action="store_true", help="re-measure methods already in --out/runs/")
    ap.add_argument("--jobs", type=int, default=1, help="methods measured in parallel (one process each)")
    return ap.parse_args(argv)


def check_checkpoint(label: str, args: argparse.Namespace) -> str | None:
    """The checkpoint a row reads, after checking it was calibrated with this table's B, M and the
    row's own settings (the run itself takes its method config from the checkpoint)."""
    name, needs_ckpt, overrides = METHODS[label]
    flag = needs_ckpt or "checkpoint"
    ckpt = getattr(args, flag)
    if not needs_ckpt:
        return None
    opt = "--" + flag.replace("_", "-")
    if not ckpt:
        raise SystemExit(f"{label!r} needs {opt} (a `train method=lococo` run)")
    from omegaconf import OmegaConf

    from ctxbench.training.checkpoint import resolve_checkpoint

    saved = OmegaConf.create(json.loads((resolve_checkpoint(ckpt) / "method.json").read_text()))
    if (saved.mem_size, saved.segment_len) != (args.mem_size, args.segment_len):
        raise SystemExit(f"{opt} {ckpt} was trained with mem_size={saved.mem_size}, "
                         f"segment_len={saved.segment_len}; pass the same --mem-size/--segment-len")
    differ = {k: saved.get(k, "unset") for k, v in overrides.items() if saved.get(k) != v}
    if differ:
        raise SystemExit(f"{label!r} needs a calibration with {overrides}; {opt} {ckpt} has {differ}")
    return ckpt


def text_slice(args: argparse.Namespace) -> str:
    """Which held-out part of --text is evaluated, in words (for errors and the table)."""
    if args.start_char is None:
        return f"the last {args.tail_chars:,} characters"
    return f"the text from character {args.start_char:,}"


def held_out_file(args: argparse.Namespace, out: Path) -> Path:
    """The held-out slice of --text as its own file (the eval runs read it with dataset=text)."""
    text = Path(args.text).read_text(encoding="utf-8")
    text = text[-args.tail_chars:] if args.start_char is None else text[args.start_char:]
    path = out / "held_out.txt"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def eval_command(label: str, args: argparse.Namespace, text: Path, run_dir: Path) -> list[str]:
    """``python -m ctxbench eval task=perplexity task.score=stream ...`` for one row."""
    name, _needs, overrides = METHODS[label]
    argv = [sys.executable, "-m", "ctxbench", "eval", "task=perplexity", "task.score=stream", f"method={name}",
            f"model={args.model}", "dataset=text", f"dataset.path={text}", "task.windows=1", "task.skip_tokens=0",
            f"task.lengths=[{','.join(map(str, args.lengths))}]", "task.baselines=[]", "progress=false",
            f"hydra.run.dir={run_dir}"]
    ckpt = check_checkpoint(label, args)
    if ckpt:
        argv.append(f"checkpoint={ckpt}")
    else:
        argv += [f"method.segment_len={args.segment_len}"] + ([f"method.mem_size={args.mem_size}"]
                                                              if name != "full_cache" else [])
        argv += [f"method.{k}={v}" for k, v in overrides.items()]
    return argv


def row_of(results: dict) -> dict:
    """One run's results.json as the table's record: ``at`` per length, seconds, LoCoCo's λ."""
    at = [{"tokens_in": r["length"], "ppl": r["ppl"], "kv_slots": r["memory_slots"], "kv_bytes": r["kv_bytes"],
           "peak_rss_bytes": r.get("peak_rss_bytes") or 0, "seconds": r.get("seconds")} for r in results["rows"]]
    return {"at": at, "seconds": max(a["seconds"] or 0.0 for a in at), "run": results.get("config", {}).get("run_dir"),
            **(results.get("method_state") or {})}


def subprocess_run(label: str, args: argparse.Namespace, text: Path, run_dir: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(eval_command(label, args, text, run_dir), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
    return json.loads((run_dir / "results.json").read_text())


def slug(label: str) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in label).strip("_")


def table(results: dict, args: argparse.Namespace) -> str:
    from ctxbench.core.markdown_table import md_table

    L = args.table_length
    mib = 1024 * 1024
    rest = [n for n in args.lengths if n != L]
    header = ["method", f"PPL @ {L}", *(f"PPL @ {n}" for n in rest), "KV slots",
              "KV MiB @ " + " / ".join(str(n) for n in args.lengths),
              "peak RSS MiB @ " + " / ".join(str(n) for n in args.lengths), "s"]
    rows = []
    for label, r in results.items():
        at = {a["tokens_in"]: a for a in r["at"]}
        rows.append([label, f"{at[L]['ppl']:.2f}", *(f"{at[n]['ppl']:.2f}" for n in rest),
                     at[max(args.lengths)]["kv_slots"],
                     " / ".join(f"{at[n]['kv_bytes'] / mib:.1f}" for n in args.lengths),
                     " / ".join(f"{at[n]['peak_rss_bytes'] / mib:.0f}" for n in args.lengths), f"{r['seconds']:.0f}"])
    return (f"Perplexity on {text_slice(args)} of `{Path(args.text).name}` "
            f"({args.model}, B={args.segment_len}, M={args.mem_size} slots per layer and KV head; one "
            f"`eval task=perplexity task.score=stream` run per row, in --out/runs/).\n\n" + md_table(header, rows) + "\n")


def plot(results: dict, args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    mib = 1024 * 1024
    for label, r in results.items():
        xs = [a["tokens_in"] for a in r["at"]]
        axes[0].plot(xs, [a["ppl"] for a in r["at"]], marker="o", label=label)
        axes[1].plot(xs, [a["kv_bytes"] / mib for a in r["at"]], marker="o", label=label)
        axes[2].plot(xs, [a["peak_rss_bytes"] / mib for a in r["at"]], marker="o", label=label)
    titles = ["perplexity (prefix of length n)", "KV cache held (MiB)", "peak resident memory (MiB)"]
    for ax, t in zip(axes, titles):
        ax.set_xscale("log", base=2)
        ax.set_xticks(args.lengths, [str(n) for n in args.lengths])
        ax.set_xlabel("tokens processed")
        ax.set_title(t)
        ax.grid(alpha=0.3)
    ppls = [a["ppl"] for r in results.values() for a in r["at"]]
    if ppls and max(ppls) / max(min(ppls), 1e-9) > 20:  # a diverging method would flatten the others
        axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{args.model}: B={args.segment_len}, M={args.mem_size}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown --methods {unknown}; choose from {list(METHODS)}")
    if args.table_length not in args.lengths:
        args.lengths = sorted(set(args.lengths) | {args.table_length})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs"  # one eval run folder per method: it resumes, and refuses another config
    runs.mkdir(exist_ok=True)
    text = held_out_file(args, out)

    def one(label: str) -> tuple[str, dict]:
        run_dir = runs / slug(label)
        if args.fresh and run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        cmd = eval_command(label, args, text, run_dir)
        done = run_dir / "table_command.json"  # written after a finished run: the command that made it
        if (run_dir / "results.json").exists() and done.exists() and json.loads(done.read_text()) == cmd[3:]:
            print(f"{label:>20}: reused {run_dir}", flush=True)
            return label, row_of(json.loads((run_dir / "results.json").read_text()))
        if done.exists() and json.loads(done.read_text()) != cmd[3:]:  # measured another way: measure again
            import shutil

            shutil.rmtree(run_dir)
        t0 = time.time()
        res = row_of(subprocess_run(label, args, text, run_dir))
        done.write_text(json.dumps(cmd[3:]))
        at = {a["tokens_in"]: a for a in res["at"]}
        print(f"{label:>20}: PPL@{args.table_length} {at[args.table_length]['ppl']:.3f}  ({time.time() - t0:.0f}s)",
              flush=True)
        return label, res

    todo = []
    for label in args.methods:
        flag = METHODS[label][1]
        if flag and not getattr(args, flag):
            opt = "--" + flag.replace("_", "-")
            if args.methods != list(METHODS):  # asked for by name: an error, not a silent empty row
                raise SystemExit(f"--methods {label!r} needs {opt} (a `train method=lococo` run)")
            print(f"skipping {label!r}: no {opt}", file=sys.stderr)
            continue
        todo.append(label)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = dict(pool.map(one, todo))
    results = {label: done[label] for label in todo}
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    (out / "table.md").write_text(table(results, args))
    plot(results, args, out / "lococo_ppl_memory.png")
    print(table(results, args))
    print(f"wrote {out}/results.json, table.md, lococo_ppl_memory.png")


if __name__ == "__main__":
    main()
