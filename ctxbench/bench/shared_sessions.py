"""How much work sessions shared across histories save: ``python -m ctxbench.bench.shared_sessions``.

Runs memory systems over a dataset (default ``longmemeval_sample``) through the evaluator's run loop on
the zero-cost scripted chat model (:class:`.scripted_llm.ScriptedChatModel`) behind a fresh call cache in a
temporary folder (so every cache hit is a prompt this run asked for before) and the real MiniLM embedder
(a fresh one per system), and prints each system's results.json ``reuse`` block as a table: embeddings
requested vs encoded, construction calls requested vs served from the call cache.

    python -m ctxbench.bench.shared_sessions [dataset=longmemeval_sample] [systems=rag,rag:session_summary,amem,memorybank,mem0]
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_SYSTEMS = ("rag", "rag:session_summary", "amem", "memorybank", "mem0")


def measure(spec: str, samples: list[Any], folder: Path) -> dict[str, Any]:
    """``spec``: a memory name, ``name:granularity`` for rag. The run's ``reuse`` block."""
    from ctxbench.bench.common import compose
    from ctxbench.bench.scripted_llm import ScriptedChatModel
    from ctxbench.core.registry import build, get
    from ctxbench.evaluation.reuse import measured
    from ctxbench.evaluation.run import run_system
    from ctxbench.evaluation.systems import HistorySystems
    from ctxbench.llm.cache import CachedLLM
    from ctxbench.llm.shared import SharedLLM
    from ctxbench.qa import get_prompt

    name, _, granularity = spec.partition(":")
    overrides = [f"memory={name}"] + ([f"memory.granularity={granularity}"] if granularity else [])
    cfg = compose("eval", overrides)
    mem = cfg.memory
    if "progress" in mem:
        mem.progress = False
    llm = SharedLLM(CachedLLM(ScriptedChatModel(), folder / "llm_cache.sqlite", backend="scripted"))
    embedder = build("embedder", cfg.embedder) if get("memory", mem.name).needs_embedder else None
    prompt = get_prompt(cfg.qa_prompt)

    def make(hid: str) -> Any:
        system = build("memory", mem, llm=llm, embedder=embedder, workdir=folder / "stores" / hid)
        system.use_prompt(prompt)
        return system

    run_system(HistorySystems(make), samples, folder, llm=llm, progress=False)
    return measured([s.history for s in samples], llm, embedder, resumed=False)


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| system | embeddings requested | encoded | saved | construction calls requested | served from cache | saved |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for spec, b in rows.items():
        e = b.get("embeddings") or {"requested": 0, "encoded": 0}
        c = b.get("construction_calls") or {"requested": 0, "served_from_cache": 0}
        es = f"{1 - e['encoded'] / e['requested']:.0%}" if e["requested"] else "–"
        cs = f"{c['served_from_cache'] / c['requested']:.0%}" if c["requested"] else "–"
        lines.append(f"| {spec} | {e['requested']} | {e['encoded']} | {es} | {c['requested']} | "
                     f"{c['served_from_cache']} | {cs} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    from ctxbench.config.compose import option_config
    from ctxbench.core.registry import build

    args = dict(a.split("=", 1) for a in argv)
    dataset = args.get("dataset", "longmemeval_sample")
    systems = [s for s in args.get("systems", ",".join(DEFAULT_SYSTEMS)).split(",") if s]
    samples = list(build("dataset", option_config("dataset", {"name": dataset})))
    rows = {}
    for spec in systems:
        with tempfile.TemporaryDirectory(prefix="ctxbench-shared-") as tmp:
            rows[spec] = measure(spec, samples, Path(tmp))
    first = next(iter(rows.values()))
    print(f"{dataset}: {len(samples)} histories, {first['session_slots']} session slots, "
          f"{first['distinct_sessions']} distinct sessions ({first['distinct_dated_sessions']} with their dates)")
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
