"""``eval`` builds a memory system once per history (ctxbench/evaluation/systems.py), never a spare one.

The first history's system is built before any question (so a bad config fails before one) and then
answers its own history; it describes the run (answer prompt, cap, placement) in results.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.core import registry
from ctxbench.evaluation.evaluator import history_dir
from ctxbench.evaluation.evaluator import main as eval_main
from tests.scripted_llm import ScriptedLLM

CONF = Path(__file__).resolve().parents[1] / "ctxbench" / "conf"


def eval_cfg(out: Path, *overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name="eval", overrides=["memory=no_context", "dataset=locomo_sample", "progress=false",
                                                      "metrics=[f1]", *overrides, f"+run_dir={out}"])


@pytest.fixture
def built(monkeypatch):
    """The workdir of every memory system built, on a scripted LLM."""
    workdirs: list[Path] = []
    real_build = registry.build

    def build(kind, c, **deps):
        if kind == "llm":
            return ScriptedLLM("Paris")
        if kind == "memory":
            workdirs.append(Path(deps["workdir"]))
        return real_build(kind, c, **deps)
    monkeypatch.setattr(registry, "build", build)
    return workdirs


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_memory_system_is_built_once_per_history(tmp_path, built, concurrency):
    out = tmp_path / "run"
    results = eval_main(eval_cfg(out, f"concurrency={concurrency}"))
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    histories = list(dict.fromkeys(p["history_id"] for p in preds))
    assert len(histories) == 2 and len(preds) == results["overall"]["n"] == 16
    assert built == [history_dir(out, h) for h in histories]  # one each, in dataset order, in its own folder
    assert results["qa_prompt"]["name"] == "brief" and results["provenance"]["placement"]["processes"] == 1
    # a rerun with every question answered ingests nothing: one system, to describe the run
    built.clear()
    again = eval_main(eval_cfg(out, f"concurrency={concurrency}"))
    assert built == [history_dir(out, histories[0])] and again["qa_prompt"] == results["qa_prompt"]


def test_a_rerun_builds_only_the_histories_left(tmp_path, built):
    out = tmp_path / "run"
    eval_main(eval_cfg(out, "limit=3"))  # the first history's first 3 questions
    assert len(built) == 1
    built.clear()
    eval_main(eval_cfg(out))
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert built == [history_dir(out, h) for h in dict.fromkeys(p["history_id"] for p in preds)]


def test_a_bad_memory_config_fails_before_any_question(tmp_path, built, monkeypatch):
    real_build = registry.build

    def build(kind, c, **deps):
        if kind == "memory":
            raise ValueError("bad memory config")
        return real_build(kind, c, **deps)
    monkeypatch.setattr(registry, "build", build)
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="bad memory config"):
        eval_main(eval_cfg(out))
    assert not (out / "predictions.jsonl").exists()
