"""End to end through the CLI on LoCoMo conv-26 with the packaged SmolLM2-135M and MiniLM (slow).

Run with ``pytest -m slow tests/test_memory_e2e.py``. The first 6 turns of history and 3 questions per
system keep it to minutes on CPU; the README table uses 10 questions (commands there).

Each system must have stored its own memory, read back from its store after the run (not from the
footprint it reports): RAG its chunks, MemoryBank its turns and the day's event summary, Mem0 and
Mem0g their extracted facts, Mem0g also relation edges in its graph, A-Mem its notes; and the
footprint it reports must cover them.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.evaluation.evaluator import history_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
# the record kinds each system's memory is made of (memory/<name>.py add_record calls)
OWN_KINDS = {"rag": ("chunk",), "memorybank": ("turn", "event"), "mem0": ("fact",), "mem0g": ("fact",),
             "amem": ("note",)}


def stored_kinds(db: Path) -> dict[str, int]:
    """Live records per kind in a system's SQLite store."""
    with sqlite3.connect(db) as c:
        return dict(c.execute("SELECT kind, COUNT(*) FROM records WHERE deleted=0 GROUP BY kind").fetchall())


def graph_edges(path: Path, hid: str) -> int:
    """Valid relation edges of ``hid`` in Mem0g's LadybugDB graph."""
    from ctxbench.memory.stores.graph import LadybugGraph

    g = LadybugGraph(path)
    try:
        return len(g.edges(hid))
    finally:
        g.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rag", "memorybank", "mem0", "mem0g", "amem"])
def test_eval_cli(name, tmp_path):
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled",
               CTXBENCH_CACHE=os.environ.get("CTXBENCH_CACHE", str(tmp_path / "cache")))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ctxbench", "eval", f"memory={name}", "dataset=locomo",
           f"dataset.path={DATA}", "dataset.conversations=[conv-26]", "dataset.limit=3",
           "memory.max_turns=6", "memory.json_retries=0", "progress=false", f"hydra.run.dir={out}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    preds = [json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3
    u = preds[0]["usage"]
    assert u["answer_calls"] == (2 if name == "amem" else 1)  # A-Mem: the question -> keywords call, then the answer
    # the structured replies are enforced: every one valid, and the memory holds something
    assert u["memory_items"] > 0
    for outputs in (preds[-1]["outputs"], preds[-1]["construction"]["outputs"]):  # the answer's, the build's
        assert outputs.get("invalid_outputs", 0) == 0, outputs
    if name != "rag":
        assert preds[0]["construction"]["calls"] > 0
    store = history_dir(out, preds[0]["history_id"])  # each history's stores in a folder of its own
    assert (out / "results.json").exists() and (store / f"{name}.sqlite").exists()
    # a rerun in the same folder repeats nothing: all answered, memory resumed
    p2 = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p2.returncode == 0, p2.stderr[-3000:]
    # the system stored its own memory (read from its store once both runs are done)
    kinds = stored_kinds(store / f"{name}.sqlite")
    for kind in OWN_KINDS[name]:
        assert kinds.get(kind, 0) > 0, f"memory={name} stored no {kind!r} records: {kinds}"
    edges = graph_edges(store / "graph.lbdb", preds[0]["history_id"]) if name == "mem0g" else 0
    if name == "mem0g":
        assert edges > 0, "memory=mem0g stored no relation edges"
    assert u["memory_items"] >= sum(kinds.get(k, 0) for k in OWN_KINDS[name]) + edges
