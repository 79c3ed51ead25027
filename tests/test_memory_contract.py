"""Every memory system, built from its conf/memory yaml through the registry, runs through the one
evaluator (``run_system``) on real LoCoMo conv-26 (first session) with a scripted chat model:
usage is filled, construction and answer tokens are kept apart, and a rerun resumes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench import registry
from ctxbench.evaluate import run_system

from memory_scripted import BowEmbedder, ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


def respond(messages, phase):
    user = messages[-1]["content"]
    if phase == "answer":
        return "Not mentioned in the conversation"
    if "NEW MESSAGES" in user:
        new = user.split("NEW MESSAGES")[-1].split("\n")[1]
        return json.dumps({"facts": [" ".join(new.split()[:8])]})
    if "NEW FACT" in user:
        return json.dumps({"event": "ADD", "text": user.split("NEW FACT: ")[1].split("\n")[0]})
    if "Entities:" in user:
        ents = user.split("Entities: ")[1].split("\n")[0].split(", ")
        return json.dumps({"relations": [{"source": ents[0], "relation": "talks to", "target": ents[-1]}]})
    if user.startswith("Messages ("):
        return json.dumps({"entities": sorted(set(re.findall(r"^(\w+):", user, re.M)))})
    if "EXISTING:" in user:
        return '{"outdated": []}'
    if user.startswith("Message ("):
        return '{"keywords": ["chat"], "context": "a chat", "tags": ["talk"]}'
    if "NEIGHBOURS" in user:
        return '{"links": ["0"], "neighbors": []}'
    return "A short summary."


@pytest.fixture(scope="module")
def samples():
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    cfg = OmegaConf.create({"name": "locomo", "path": str(DATA), "conversations": ["conv-26"], "limit": 3})
    return registry.build("dataset", cfg)


@pytest.mark.parametrize("name", ["rag", "memorybank", "mem0", "mem0g", "amem"])
def test_system_through_evaluator(name, samples, tmp_path):
    cfg = OmegaConf.load(ROOT / "conf" / "memory" / f"{name}.yaml")
    cfg.max_sessions, cfg.progress = 1, False
    assert cfg.needs_embedder
    llm = ScriptedLLM(respond)
    system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == 3
    u = recs[0]["usage"]
    assert u["answer_calls"] == 1 and u["context_tokens"] > 0 and u["memory_items"] > 0
    assert u["construction_calls"] == llm.meter.get("construction").calls
    assert (u["construction_calls"] > 0) == (name != "rag")
    assert all(p in ("construction", "answer") for p, _ in llm.calls)
    n_calls = len(llm.calls)
    # a fresh system on the same run folder resumes: ingestion repeats no LLM call
    system.close()
    llm2 = ScriptedLLM(respond)
    system2 = registry.build("memory", cfg, llm=llm2, embedder=BowEmbedder(), workdir=tmp_path)
    system2.ingest(samples[0].history)
    assert llm2.meter.get("construction").calls == 0 and n_calls > 0


@pytest.mark.parametrize("name", ["rag", "memorybank", "mem0", "mem0g", "amem"])
def test_system_on_dialsim_fixture(name, tmp_path):
    """The DialSim fixture (multiple-choice questions, "March 3, 2021" dates) through the evaluator."""
    samples = registry.build("dataset", OmegaConf.load(ROOT / "conf" / "dataset" / "dialsim_sample.yaml"))
    cfg = OmegaConf.load(ROOT / "conf" / "memory" / f"{name}.yaml")
    cfg.progress = False
    llm = ScriptedLLM(respond)
    system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == len(samples[0].questions) > 0
    assert all(r["usage"]["memory_items"] > 0 for r in recs)
    if name == "memorybank":  # three dated sessions on three days: one event summary per day
        assert len(system.store.records(samples[0].history.id, "event")) == 3
    system.close()
