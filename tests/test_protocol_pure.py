"""``protocol_pure=true``: no system is told a question's gold fields at answer time (category, answer,
adversarial distractor, evidence), so nothing is chosen by category — LoCoMo's temporal hint and
adversarial two-option form, A-Mem's per-category k and prompts; ``false`` keeps them (the default).
The records keep the gold fields for scoring either way."""
from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage
from ctxbench.evaluation.evaluator import HistorySystems, answer_all
from ctxbench.memory.baselines import FullContext
from ctxbench.qa import get_prompt
from ctxbench.qa.forms import without_gold

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM

TEXT = "When did Bob go to Paris?"


def questions() -> list[Question]:
    """The same question in each LoCoMo category, with every gold field set."""
    return [Question(f"q{c}", TEXT, "May 2023", category=c, evidence=["D1:1"],
                     adversarial_answer="to Rome" if c == 5 else None) for c in range(1, 6)]


def history() -> History:
    turns = [Turn("Bob", "I went to Paris in May", "D1:1"), Turn("Ann", "How nice", "D1:2")]
    return History("h", [Session("s1", turns, "1 May 2023")], speakers=["Bob", "Ann"])


class Told(System):
    """Keeps every question it is asked."""

    def __init__(self) -> None:
        self.asked: list[Question] = []

    def ingest(self, history: History) -> None:
        pass

    def answer(self, question: Question) -> Prediction:
        self.asked.append(question)
        return Prediction("May", Usage())


def run(pure: bool, system: System, tmp_path, llm: Any = None) -> list[dict[str, Any]]:
    cfg = OmegaConf.create({"limit": None, "progress": False, "log_samples": False, "protocol_pure": pure})
    return answer_all(cfg, HistorySystems.one(system), llm, 1, [Sample(history(), questions())], tmp_path, None)


@pytest.mark.parametrize("pure", [True, False])
def test_the_switch_decides_what_the_system_is_told_and_records_keep_the_gold(pure, tmp_path):
    system = Told()
    records = run(pure, system, tmp_path)
    if pure:
        assert all((q.category, q.category_name, q.answer, q.adversarial_answer, q.evidence) == (0, "", "", None, [])
                   for q in system.asked)
        assert all(q.question == TEXT and q.meta["prompt_style"] == "locomo" for q in system.asked)
    else:
        assert system.asked == questions()  # today's behaviour: the dataset's question as it is
    assert [(r["category"], r["answer"]) for r in records] == [(c, "May 2023") for c in range(1, 6)]
    assert records[4]["adversarial_answer"] == "to Rome"


@pytest.mark.parametrize("prompt", ["locomo", "amem", "mem0", "brief"])
def test_protocol_pure_prompts_are_the_same_for_every_category(prompt, tmp_path):
    """Full context under each answer prompt: one prompt for all five categories when pure; the temporal
    and adversarial ones differ from it otherwise."""
    sent = {}
    for pure in (True, False):
        llm = ScriptedLLM("May")
        system = FullContext(option_config("memory", {"name": "full_context"}), llm=llm)
        system.use_prompt(get_prompt(prompt))
        run(pure, system, tmp_path / f"{prompt}{pure}", llm=llm)
        sent[pure] = [c["messages"] for c in llm.calls]
    assert all(m == sent[True][0] for m in sent[True])
    assert sent[False][0] == sent[True][0]  # multi-hop: no category-chosen form either way
    assert sent[False][1] != sent[True][1] and sent[False][4] != sent[True][4]  # temporal hint, adversarial form
    assert "to Rome" not in str(sent[True]) and "to Rome" in str(sent[False][4])


def test_amem_takes_its_single_k_without_the_category(tmp_path):
    cfg = option_config("memory", {"name": "amem", "k": 3, "k_by_category": {"temporal": 7, "adversarial": 9}})
    mem = registry.build("memory", cfg, llm=ScriptedLLM("{}"), embedder=BowEmbedder(), workdir=tmp_path)
    told = [mem.k_for(q) for q in questions()]
    assert told == [3, 7, 3, 3, 9]
    assert [mem.k_for(without_gold(q)) for q in questions()] == [3] * 5
    mem.close()
