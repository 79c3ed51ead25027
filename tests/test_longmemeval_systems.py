"""Every registered memory system and every registered method answers every question of the shipped
LongMemEval sample (``dataset=longmemeval_sample``) through the one evaluator; the CLI runs it too.

Memory systems use the bench's scripted chat model and the bag-of-words embedder (as
tests/test_system_contract.py), methods the tiny random Llama (first 2 questions, 4 new tokens).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.evaluation.evaluator import evaluate_samples

from conftest import TINY_ANSWERS, run_cli
from test_system_contract import OPTIONAL_PACKAGE, SMALL, composed, method_params, scripted_memory_run

ROOT = Path(__file__).resolve().parents[1]
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
assert OPTIONAL_PACKAGE  # the same optional-package skips as the contract test


@pytest.fixture(scope="module")
def lme():
    return registry.build("dataset", option_config("dataset", {"name": "longmemeval_sample"}))


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", registry.names("memory"))
def test_every_memory_system_answers_every_sample_question(name, lme, tmp_path):
    res, recs, llm, _ = scripted_memory_run(name, lme, tmp_path)
    assert [r["id"] for r in recs] == [s.questions[0].id for s in lme] and res["overall"]["n"] == len(lme) == 13
    assert not llm.unknown, f"{name}: prompts without a scripted reply: {dict(llm.unknown)}"
    assert res["health"]["invalid_outputs"] == 0, res["health"]
    by_type = {r["category_name"] for r in recs}
    assert len(by_type) == 6
    assert all(r["usage"]["answer_calls"] >= 1 for r in recs)


@pytest.mark.parametrize("name", method_params())
def test_every_method_answers_sample_questions(name, lme, tmp_path):
    from ctxbench.models.loading import load_model

    cfg = OmegaConf.merge(composed("method", name), SMALL.get(name, {}), {"max_new_tokens": 4})
    if name == "llmlingua2":
        from test_llmlingua_methods import tiny_classifier

        cfg.classifier = str(tiny_classifier(tmp_path / "classifier"))
    system = registry.build("method", cfg, bundle=load_model(option_config("model", {"name": "tiny"})))
    system.eval()
    first = lme[:2]
    res = evaluate_samples(system, first, tmp_path)
    recs = records(tmp_path)
    assert [r["id"] for r in recs] == [s.questions[0].id for s in first] and res["overall"]["n"] == 2
    assert all(r["usage"]["answer_calls"] == 1 for r in recs)


def test_the_cli_runs_the_sample_with_the_longmemeval_prompt(tmp_path):
    out = tmp_path / "run"
    p = run_cli("eval", "memory=full_context", "dataset=longmemeval_sample", "qa_prompt=longmemeval",
                "llm.model=tiny", TINY_ANSWERS, "llm.cache=false", "progress=false",
                f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = records(out)
    assert len(recs) == 13 and len({r["id"] for r in recs}) == 13
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == 13 and res["qa_prompt"]["name"] == "longmemeval"
