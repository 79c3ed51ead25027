"""Every memory system, built from its conf/memory yaml through the registry, runs through the one
evaluator (``run_system``) on real LoCoMo conv-26 (first session) with a scripted chat model:
usage is filled, construction and answer tokens are kept apart, and a rerun resumes. The scripted
replies are the ones each system declares beside its prompts (``SCRIPTED``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.evaluation.evaluator import run_system

from ctxbench.bench.scripted_llm import ScriptedChatModel

from memory_scripted import BowEmbedder
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


def stored_systems() -> list[str]:
    """Every registered memory system that builds a store (needs an embedder)."""
    return [n for n in registry.names("memory")
            if load_conf_file(ROOT / "conf" / "memory" / f"{n}.yaml").get("needs_embedder")]


@pytest.fixture(scope="module")
def samples():
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    cfg = option_config("dataset", {"name": "locomo", "path": str(DATA), "conversations": ["conv-26"], "limit": 3})
    return registry.build("dataset", cfg)


@pytest.mark.parametrize("name", stored_systems())
def test_system_through_evaluator(name, samples, tmp_path):
    cfg = load_conf_file(ROOT / "conf" / "memory" / f"{name}.yaml")
    cfg.max_sessions, cfg.progress = 1, False
    assert cfg.needs_embedder
    llm = ScriptedChatModel()
    system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == 3
    u = recs[0]["usage"]
    assert u["answer_calls"] >= 1 and u["context_tokens"] > 0 and u["memory_items"] > 0
    assert u["construction_calls"] == llm.meter.get("construction").calls
    assert (u["construction_calls"] > 0) == (name not in ("rag", "memgpt"))  # memgpt summarises only on overflow
    assert set(llm.meter.phases) <= {"construction", "answer"}
    n_calls = sum(c.calls for c in llm.meter.phases.values())
    # a fresh system on the same run folder resumes: ingestion repeats no LLM call
    system.close()
    llm2 = ScriptedChatModel()
    system2 = registry.build("memory", cfg, llm=llm2, embedder=BowEmbedder(), workdir=tmp_path)
    system2.ingest(samples[0].history)
    assert llm2.meter.get("construction").calls == 0 and n_calls > 0


@pytest.mark.parametrize("name", stored_systems())
def test_system_on_dialsim_fixture(name, tmp_path):
    """The DialSim fixture (multiple-choice questions, "March 3, 2021" dates) through the evaluator."""
    samples = registry.build("dataset", load_conf_file(ROOT / "conf" / "dataset" / "dialsim_sample.yaml"))
    cfg = load_conf_file(ROOT / "conf" / "memory" / f"{name}.yaml")
    cfg.progress = False
    llm = ScriptedChatModel()
    system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == sum(len(s.questions) for s in samples) > 0  # one history per question session
    assert all(r["usage"]["memory_items"] > 0 for r in recs)
    if name == "memorybank":  # three dated sessions on three days: one event summary per day
        assert len(system.store.records(samples[-1].history.id, "event")) == 3
    system.close()
