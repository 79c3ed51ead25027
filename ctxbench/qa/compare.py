"""``python -m ctxbench.qa.compare``: answer prompts side by side: each system × each ``qa_prompt`` on a
LoCoMo split, F1 per category ± SE.

    python -m ctxbench.qa.compare                                  # dev split, rag/full_context/no_context
    python -m ctxbench.qa.compare --sessions 5 --choose            # + the prompt with the best F1 on categories 1-4 (dev only)
    python -m ctxbench.qa.compare --split heldout --prompts locomo,brief   # report on the other conversations
    python -m ctxbench.qa.compare --out outputs/qa_prompts -- llm=openai llm.model=...   # eval overrides

The dev split is LoCoMo conv-26 and conv-30; the held-out split is the other eight conversations.
Choosing a default (``--choose``) reads the dev split only: it is refused with ``--split heldout``,
so the reported conversations never tune the prompt. Every cell is one ordinary
``python -m ctxbench eval memory=SYSTEM qa_prompt=PROMPT dataset=locomo dataset.conversations=[...]``
run (in this process) in ``<out>/runs/<split>/<system>__<prompt>``; a rerun resumes each cell (and
refuses a cell folder made with another config, as eval does). The table's F1 and standard errors
are the cells' results.json (``by_category`` with bootstrap ``f1_stderr``: ctxbench/metrics/aggregate.py).
Writes ``<out>/qa_prompts_<split>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctxbench.__main__ import main as ctxbench_main
from ctxbench.__main__ import split_at_dashes
from ctxbench.core.errors import CtxbenchError

LOCOMO_IDS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48",
              "conv-49", "conv-50")  # the official locomo10.json
DEV = ("conv-26", "conv-30")
SPLITS = {"dev": DEV, "heldout": tuple(c for c in LOCOMO_IDS if c not in DEV)}
SYSTEMS = ("rag", "full_context", "no_context")
PROMPTS = ("locomo", "mem0", "amem", "brief")
CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop", "adversarial")
ANSWERABLE = CATEGORIES[:4]  # LoCoMo categories 1-4: the criterion; adversarial's "not mentioned" rule would dominate


class CompareError(CtxbenchError):
    """A request the comparison refuses (one line)."""


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, extra = split_at_dashes(argv)
    ap = argparse.ArgumentParser(prog="python -m ctxbench.qa.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="memory systems, comma-separated")
    ap.add_argument("--prompts", default=",".join(PROMPTS), help="qa_prompt names, comma-separated")
    ap.add_argument("--split", choices=sorted(SPLITS), default="dev")
    ap.add_argument("--sessions", type=int, default=None, help="dataset.sessions=N (first N sessions)")
    ap.add_argument("--limit", type=int, default=None, help="dataset.limit=N questions per conversation")
    ap.add_argument("--choose", action="store_true", help="name the prompt with the best mean F1 (dev split only)")
    ap.add_argument("--out", default="outputs/qa_prompts")
    return ap.parse_args(argv), extra


def check_request(split: str, choose: bool, prompts: list[str]) -> None:
    """Refuse choosing on held-out conversations, and unknown prompt names."""
    from ctxbench.qa import PROMPTS as KNOWN

    if choose and split != "dev":
        raise CompareError(f"--choose reads the dev split only ({', '.join(DEV)}); --split {split} is for "
                           "reporting the chosen prompt, never for choosing it")
    bad = [p for p in prompts if p not in KNOWN]
    if bad:
        raise CompareError(f"--prompts: unknown {', '.join(bad)}; use some of {', '.join(KNOWN)}")


def cell_overrides(system: str, prompt: str, split: str, args: argparse.Namespace, extra: list[str],
                   run: Path) -> list[str]:
    """The eval overrides of one (system, prompt) cell."""
    convs = ",".join(SPLITS[split])
    out = [f"memory={system}", f"qa_prompt={prompt}", "dataset=locomo", f"dataset.conversations=[{convs}]",
           "progress=false", f"hydra.run.dir={run}"]
    if args.sessions is not None:
        out.append(f"dataset.sessions={args.sessions}")
    if args.limit is not None:
        out.append(f"dataset.limit={args.limit}")
    return out + extra


def run_cell(overrides: list[str], run: Path) -> dict[str, Any]:
    """One eval run (in this process, through the CLI entry point); its results.json."""
    try:
        ctxbench_main(["eval", *overrides])
    except SystemExit as e:  # the CLI reports a user error in one line and exits non-zero
        if e.code not in (0, None):
            raise CompareError(f"eval {' '.join(overrides[:2])} failed (exit {e.code}); see the line above") from e
    return json.loads((run / "results.json").read_text())


def pooled(cats: dict[str, dict[str, Any]], names: tuple[str, ...] = ANSWERABLE) -> dict[str, Any]:
    """F1 over the questions of categories ``names`` (each category's F1 weighted by its n), with the SE of
    that weighted mean from the categories' bootstrap SEs (categories resampled independently)."""
    parts = [cats[c] for c in names if c in cats and cats[c].get("f1") is not None and cats[c].get("n")]
    n = sum(int(c["n"]) for c in parts)
    if not n:
        return {"n": 0, "f1": None, "f1_stderr": None}
    f1 = sum(int(c["n"]) * float(c["f1"]) for c in parts) / n
    ses = [c.get("f1_stderr") for c in parts]
    se = None if any(x is None for x in ses) else (sum((int(c["n"]) * float(x)) ** 2 for c, x in zip(parts, ses))
                                                   ** 0.5 / n)
    return {"n": n, "f1": round(f1, 4), "f1_stderr": None if se is None else round(se, 4)}


def cell_row(system: str, prompt: str, res: dict[str, Any], run: Path) -> dict[str, Any]:
    """F1 ± SE overall, on categories 1-4 pooled, and per category for one cell."""
    cats = {name: {"n": c.get("n"), "f1": c.get("f1"), "f1_stderr": c.get("f1_stderr")}
            for name, c in (res.get("by_category") or {}).items()}
    ov = res.get("overall") or {}
    rec = res.get("qa_prompt") or {}
    return {"system": system, "prompt": prompt, "version": rec.get("version"), "run": str(run),
            "answer_max_tokens": rec.get("answer_max_tokens"),
            "overall": {"n": ov.get("n"), "f1": ov.get("f1"), "f1_stderr": ov.get("f1_stderr")},
            "answerable": pooled(cats), "by_category": cats}


def choose(rows: list[dict[str, Any]], prompts: list[str]) -> dict[str, Any]:
    """The prompt whose F1 on categories 1-4 (``answerable``), averaged over the systems, is highest (ties:
    the first listed). Adversarial questions are left out of the criterion: their gold is "not mentioned",
    so a prompt that refuses more would win on them while answering the other categories worse."""
    means = {}
    for p in prompts:
        vals = [r["answerable"]["f1"] for r in rows if r["prompt"] == p and r["answerable"]["f1"] is not None]
        means[p] = round(sum(vals) / len(vals), 4) if vals else None
    scored = [p for p in prompts if means[p] is not None]
    best = max(scored, key=lambda p: means[p]) if scored else None
    return {"chosen": best, "mean_f1": means}


def _cell(v: dict[str, Any] | None) -> str:
    if not v or v.get("f1") is None:
        return "–"
    se = v.get("f1_stderr")
    return f"{v['f1']:.3f} ± {se:.3f} (n={v.get('n')})" if se is not None else f"{v['f1']:.3f} (n={v.get('n')})"


def markdown(report: dict[str, Any]) -> str:
    """One table: a row per (prompt, system), F1 ± SE overall and per category."""
    cats = [c for c in CATEGORIES if any(c in r["by_category"] for r in report["rows"])]
    head = ["prompt", "system", "overall", "categories 1-4", *cats]
    lines = [f"# Answer prompts on LoCoMo {report['split']} ({', '.join(report['conversations'])}"
             + (f", sessions={report['sessions']}" if report.get("sessions") else "") + ")", "",
             "F1 ± bootstrap standard error (n questions).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(report["rows"], key=lambda r: (report["prompts"].index(r["prompt"]), r["system"])):
        cells = [f"{r['prompt']} ({r['version']})", r["system"], _cell(r["overall"]), _cell(r.get("answerable"))]
        cells += [_cell(r["by_category"].get(c)) for c in cats]
        lines.append("| " + " | ".join(cells) + " |")
    if report.get("choice"):
        ch = report["choice"]
        lines += ["", f"Chosen on dev (best mean F1 on categories 1-4 over systems): **{ch['chosen']}**; means: "
                  + ", ".join(f"{p} {m}" for p, m in ch["mean_f1"].items())]
    return "\n".join(lines) + "\n"


def compare(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Run every cell, then write and return the report."""
    systems = [s for s in args.systems.split(",") if s]
    prompts = [p for p in args.prompts.split(",") if p]
    check_request(args.split, args.choose, prompts)
    out = Path(args.out)
    rows = []
    for system in systems:
        for prompt in prompts:
            run = out / "runs" / args.split / f"{system}__{prompt}"
            res = run_cell(cell_overrides(system, prompt, args.split, args, extra, run), run)
            rows.append(cell_row(system, prompt, res, run))
    report = {"split": args.split, "conversations": list(SPLITS[args.split]), "sessions": args.sessions,
              "limit": args.limit, "systems": systems, "prompts": prompts, "overrides": extra, "rows": rows}
    if args.choose:
        report["choice"] = choose(rows, prompts)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"qa_prompts_{args.split}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"qa_prompts_{args.split}.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(argv)
    try:
        report = compare(args, extra)
    except CompareError as e:
        print(f"ctxbench.qa.compare: error: {e}", file=sys.stderr)
        return 2
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
