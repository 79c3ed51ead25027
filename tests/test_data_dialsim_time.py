"""DialSim question time: a question asked in session t sees the sessions up to t, never t+1
(jiho283/Simulator simulator.py streams the show and asks during the session), so a "not happened
yet" question is answered from a history without the answer and its gold is "I don't know"."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.dialsim import UNKNOWN_ANSWER
from ctxbench.data.errors import DataError
from ctxbench.evaluation.evaluator import run_system

from scripted_llm import ScriptedLLM
from ctxbench.config.schemas import load_conf_file

REPO = Path(__file__).resolve().parents[1]
IDK = UNKNOWN_ANSWER


def q(default, answer, options):
    return {"questions": {"default": default}, "answer": answer, "options": options}


# session 1 asks about Nora's dog before session 2 reveals it (DialSim's before_event_unans type)
SHOW = {
    "S01E01": {
        1: {"date": "May 1, 2021", "script": "Nora: I want a dog one day.\nTheo: You'd be great with a dog.\n",
            "easy_q": {"before_event_unans": {0: q("What is the name of Nora's dog?", IDK,
                                                    ["Biscuit", "Rex", "Max", "Bella", IDK])}}},
        2: {"date": "May 9, 2021", "script": "Nora: Meet my new dog, Biscuit!\nTheo: Hello, Biscuit.\n",
            "easy_q": {"ans_wo_time": {0: q("What is the name of Nora's dog?", "Biscuit",
                                             ["Biscuit", "Rex", "Max", "Bella", IDK])}}},
    },
}


def load(path, **kw):
    base = load_conf_file(REPO / "conf/dataset/dialsim_sample.yaml")
    return registry.build("dataset", OmegaConf.merge(base, {"path": str(path)}, kw))


@pytest.fixture
def show(tmp_path):
    p = tmp_path / "dog_dialsim.pickle"
    p.write_bytes(pickle.dumps(SHOW))
    return p


def test_fixture_one_history_per_question_session():
    s = registry.build("dataset", load_conf_file(REPO / "conf/dataset/dialsim_sample.yaml"))
    assert [x.history.id for x in s] == ["dialsim_sample@S01E01/1", "dialsim_sample@S01E01/2", "dialsim_sample@S01E02/1"]
    assert [[y.id for y in x.history.sessions] for x in s] == [
        ["S01E01/1"], ["S01E01/1", "S01E01/2"], ["S01E01/1", "S01E01/2", "S01E02/1"]]
    for x in s:  # every question is in the history that ends at its own session
        assert x.questions and {q.meta["session"] for q in x.questions} == {x.history.sessions[-1].id}
    whole = registry.build("dataset", OmegaConf.merge(
        load_conf_file(REPO / "conf/dataset/dialsim_sample.yaml"), {"question_time": "none"}))
    assert [q.id for x in s for q in x.questions] == [q.id for q in whole[0].questions]  # same order, none lost
    per_ep = registry.build("dataset", OmegaConf.merge(
        load_conf_file(REPO / "conf/dataset/dialsim_sample.yaml"), {"per_episode": True}))
    assert [x.history.id for x in per_ep] == ["dialsim_sample-S01E01@S01E01/1", "dialsim_sample-S01E01@S01E01/2",
                                              "dialsim_sample-S01E02@S01E02/1"]
    assert [y.id for y in per_ep[2].history.sessions] == ["S01E02/1"]  # an episode's prefix stays in it


@pytest.mark.parametrize("fmt", ["multi_choice", "open_ended"])
def test_not_happened_yet_question_never_sees_the_next_session(show, fmt):
    s = load(show, answer_format=fmt)
    early, late = s[0], s[1]
    assert [q.category for q in early.questions] == ["before_event_unans"]
    assert "Biscuit" not in early.history.render() and "Biscuit" in late.history.render()
    gold = early.questions[0]
    assert gold.answer == IDK and gold.meta["answer_letter"] == "(E)"  # the simulator's correct option
    assert late.questions[0].answer == "Biscuit"


def test_through_the_evaluator_a_question_sees_only_its_past(show, tmp_path):
    """full_context answers each question from the sessions up to its own: the session-1 prompt has
    no session-2 line; with question_time=none (the old behaviour) it had."""
    def prompts(samples, out):
        llm = ScriptedLLM("(E)", context_window=4096)
        system = registry.build("memory", load_conf_file(REPO / "conf/memory/full_context.yaml"), llm=llm,
                                embedder=None, workdir=out)
        recs = run_system(system, samples, out, llm=llm, progress=False)
        return recs, {r["id"]: c["messages"][-1]["content"] for r, c in zip(recs, llm.calls)}

    samples = load(show)
    recs, seen = prompts(samples, tmp_path / "a")
    early, late = samples[0].questions[0].id, samples[1].questions[0].id
    assert "Biscuit!" not in seen[early] and "I want a dog one day." in seen[early]
    assert "Meet my new dog, Biscuit!" in seen[late]
    assert [r["history_id"] for r in recs] == ["dog@S01E01/1", "dog@S01E01/2"]
    assert recs[0]["prediction"] == IDK == recs[0]["answer"]  # "(E)" is the I-don't-know option
    _, old = prompts(load(show, question_time="none"), tmp_path / "b")
    assert "Meet my new dog, Biscuit!" in old[early]


def test_bad_question_time(show):
    with pytest.raises(DataError, match="field 'dataset.question_time'.*unknown question_time 'later'"):
        load(show, question_time="later")
