"""A construction step whose LLM call failed is never committed, and a rerun redoes exactly it.

For every registered memory system whose construction calls the LLM: a first run against a backend
that fails some construction calls (2 of the first 6) stops each history at its first failed step (nothing of
that step kept, its questions written ``failed`` with ``construction_stopped``, health failed); a
second faulty run gets further; a healthy rerun in the same folder ends with the store and the
records of a clean run (timings aside). The backend is the bench's scripted chat model.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.config.schemas import load_conf_file
from ctxbench.core import registry
from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.llm.base import ChatResult
from ctxbench.llm.shared import SharedLLM
from ctxbench.metrics.health import run_health

from memory_scripted import BowEmbedder
from test_eval_concurrency_systems import SETTINGS, samples, untimed

ROOT = Path(__file__).resolve().parents[1]
# MemGPT builds with the LLM when its FIFO overflows (memory pressure, flush summaries): a small one
BUILD = {"rag": {"granularity": "session_summary"}, "memgpt": {"fifo_tokens": 60}}
BUILDS_WITH_LLM = {"amem", "mem0", "mem0g", "memgpt", "memorybank", "rag", "readagent"}


class Flaky(ScriptedChatModel):
    """The scripted model, failing the construction calls numbered in ``fail_at`` (1-based)."""

    def __init__(self, fail_at: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.fail_at, self.construction_calls = fail_at, 0

    def chat(self, messages, *, phase: str = "answer", **kw: Any) -> ChatResult:
        if phase == "construction":
            self.construction_calls += 1
            if self.construction_calls in self.fail_at:
                r = ChatResult("", 0, 0, failed=True, error="HTTP 503 from the scripted server")
                self.meter.add(phase, r)
                return r
        return super().chat(messages, phase=phase, **kw)


def config(name: str) -> Any:
    cfg = load_conf_file(ROOT / "conf" / "memory" / f"{name}.yaml")
    for key, value in {**SETTINGS.get(name, {}), **BUILD.get(name, {}), "progress": False}.items():
        if key in cfg:
            cfg[key] = value
    return cfg


def run(name: str, out: Path, fail_at: frozenset[int] = frozenset(), concurrency: int = 1
        ) -> tuple[list[dict[str, Any]], Flaky]:
    cfg = config(name)
    backend = Flaky(fail_at)
    llm = SharedLLM(backend)
    embedder = BowEmbedder() if cfg.get("needs_embedder") else None
    systems = HistorySystems(lambda hid: registry.build("memory", cfg, llm=llm, embedder=embedder,
                                                       workdir=out / "stores" / hid))
    records = run_system(systems, samples(2, 2), out, llm=llm, progress=False, concurrency=concurrency)
    return records, backend


def store_snapshot(name: str, out: Path) -> dict[str, Any]:
    """Every table of each history's stores (change times and build seconds aside), and Mem0g's graph."""
    snap: dict[str, Any] = {}
    for db in sorted((out / "stores").glob("*/*.sqlite")):
        conn = sqlite3.connect(db)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for t in tables:
            cols = [c[1] for c in conn.execute(f"PRAGMA table_info({t})")]
            rows = [dict(zip(cols, r)) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1")]
            for r in rows:
                r.pop("at", None)
                if r.get("key") == "_cost":
                    r["value"] = {k: v for k, v in json.loads(r["value"]).items() if k != "seconds"}
            snap[f"{db.parent.name}/{db.name}/{t}"] = rows
        conn.close()
    if name == "mem0g":
        for hdir in sorted((out / "stores").iterdir()):
            system = registry.build("memory", config(name), llm=Flaky(), embedder=BowEmbedder(), workdir=hdir)
            snap[f"{hdir.name}/graph"] = ([_plain(n) for n in system.graph.nodes(hdir.name)],
                                          [_plain(e) for e in system.graph.edges(hdir.name, valid_only=False)])
            system.close()
    return snap


def _plain(item: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(item).items() if k != "emb"}


@pytest.mark.parametrize("name", sorted(BUILDS_WITH_LLM))
def test_failed_construction_steps_are_redone_and_end_as_a_clean_run(name, tmp_path):
    clean, clean_llm = run(name, tmp_path / "clean")
    assert clean_llm.construction_calls > 2, f"memory={name}: its construction makes no LLM calls"
    assert not any(r.get("failed") for r in clean)

    folder = tmp_path / "faulty"
    first, _ = run(name, folder, frozenset({3, 6}), concurrency=2)
    stopped = [r for r in first if r.get("construction_stopped")]
    assert stopped, f"memory={name}: no history stopped at its failed call"
    for r in stopped:  # not answers: nothing published from a half-built memory
        assert r["failed"] and r["prediction"] == "" and "construction stopped at step" in r["error"]
        s = r["construction_stopped"]
        assert 1 <= s["step"] <= s["steps"] and s["failed_calls"] >= 1
    health = run_health(first)
    assert health["status"] == "failed" and "construction stopped at step" in health["reason"]
    assert set(health["stopped_histories"]) == {r["history_id"] for r in stopped}

    run(name, folder, frozenset({4}))  # still flaky: gets further, or stops again
    again, healthy = run(name, folder)
    assert not any(r.get("failed") for r in again)
    assert untimed(again) == untimed(clean), f"memory={name}: the rerun's records differ from a clean run's"
    assert store_snapshot(name, folder) == store_snapshot(name, tmp_path / "clean")
    assert run_health(again)["status"] == "ok"
    assert healthy.construction_calls < clean_llm.construction_calls  # committed steps were not redone


def test_every_system_that_builds_with_the_llm_is_covered():
    """A newly registered memory system is either covered above or builds without LLM calls."""
    without = {"full_context", "no_context", "http"}  # http builds in its remote: tests/test_memory_http.py
    assert set(registry.names("memory")) == BUILDS_WITH_LLM | without
