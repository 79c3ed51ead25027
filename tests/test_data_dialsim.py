"""DialSim: the shipped fixture in the official pickle layout, both answer formats, the restricted
unpickler refusing code, and bad layouts."""
from __future__ import annotations

import importlib.util
import os
import pickle
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.dialsim import UNKNOWN_ANSWER, load_dialsim_file, script_turns
from ctxbench.data.errors import DataError
from ctxbench.data.safe_pickle import safe_load, safe_loads
from ctxbench.config.schemas import load_conf_file

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "data" / "samples" / "dialsim_sample.pickle"


def load(**kw):
    """The fixture as one history per show (``question_time: none``) unless ``kw`` says otherwise."""
    base = load_conf_file(REPO / "conf/dataset/dialsim_sample.yaml")
    return registry.build("dataset", OmegaConf.merge(base, {"question_time": "none"}, kw))


def test_fixture_is_what_the_script_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_dialsim_sample", REPO / "data/samples/make_dialsim_sample.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(tmp_path / "x.pickle")
    assert safe_load(out) == safe_load(FIXTURE) == mod.DATA


def test_multiple_choice(tmp_path):
    s = load()
    assert len(s) == 1
    h = s[0].history
    assert [x.id for x in h.sessions] == ["S01E01/1", "S01E01/2", "S01E02/1"]
    assert h.sessions[0].date == "March 3, 2021"
    qs = {q.category: q for q in s[0].questions}
    assert set(qs) == {"cur", "ans_wo_time", "past", "dont_know_unans", "past_cur"}  # ans_w_time: answer not an option
    assert s.quirks["dropped_answer_not_in_options"] == 1
    cur = qs["cur"]
    assert cur.question == "What arrived at the bakery on Monday?" and cur.answer == "The new oven"
    assert cur.options == ["The new oven", "A cat", "A delivery van", "Flour", UNKNOWN_ANSWER]
    assert cur.meta["answer_letter"] == "(A)" and cur.meta["level"] == "hard" and cur.meta["session"] == "S01E01/1"
    assert cur.meta["phrasings"]["Theo"] == "Nora, what arrived here on Monday?"
    assert qs["dont_know_unans"].meta["answer_letter"] == "(E)" and qs["ans_wo_time"].meta["level"] == "easy"


def test_open_ended():
    s = load(answer_format="open_ended")
    qs = {q.category: q for q in s[0].questions}
    assert len(qs) == 6 and all(q.options is None for q in qs.values())
    assert qs["dont_know_unans"].answer == UNKNOWN_ANSWER
    assert qs["ans_w_time"].answer == "the plants" and qs["ans_w_time"].meta["answer_letter"] is None


def test_subsetting():
    assert [x.history.id for x in load(per_episode=True)] == ["dialsim_sample-S01E01", "dialsim_sample-S01E02"]
    one = load(episodes=["S01E02"])
    assert [x.id for x in one[0].history.sessions] == ["S01E02/1"]
    assert {q.meta["level"] for q in load(levels=["easy"])[0].questions} == {"easy"}
    assert [q.category for q in load(question_types=["past", "cur"])[0].questions] == ["cur", "past"]
    assert len(load(limit=2)[0].questions) == 2
    assert [x.id for x in load(max_episodes=1)[0].history.sessions] == ["S01E01/1", "S01E01/2"]
    with pytest.raises(DataError, match="unknown episode"):
        load(episodes=["S09E99"])
    with pytest.raises(DataError, match="unknown answer format 'essay'"):
        load(answer_format="essay")


def test_script_to_turns():
    quirks = Counter()
    turns = script_turns("Teleplay: X\n[Scene: a room.]\nNora: Hi there.\nsecond line\n\nTheo: Yo: hey\n", "e/1", quirks)
    assert [(t.speaker, t.text) for t in turns] == [
        ("Narrator", "[Scene: a room.]"), ("Nora", "Hi there.\nsecond line"), ("Theo", "Yo: hey")]
    assert [t.id for t in turns] == ["e/1:1", "e/1:2", "e/1:3"]
    assert quirks == Counter(credit_lines_skipped=1, narration_lines=1, continuation_lines=1)
    h = load()[0].history.render()
    assert "Nora: Theo, the new oven finally arrived on Monday." in h and "Teleplay" not in h


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    blob = pickle.dumps({"S01E01": {1: {"script": _Payload(marker), "date": "x"}}})
    bad = tmp_path / "evil_dialsim.pickle"
    bad.write_bytes(blob)
    with pytest.raises(DataError) as e:
        load_dialsim_file(bad)
    assert str(bad) in str(e.value) and "refused to unpickle" in str(e.value) and "system" in str(e.value)
    assert not marker.exists()
    with pytest.raises(DataError, match="refused"):
        load(path=str(bad))
    assert not marker.exists()
    # the payload is real: the stock unpickler runs it
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Payload(control)))
    assert control.exists()


@pytest.mark.parametrize("obj", [Counter(a=1), Path("x"), eval, {"k": {1, 2}, "t": (1, 2.0, None, True, b"x")}])
def test_only_builtin_containers_and_scalars(obj):
    blob = pickle.dumps(obj, protocol=2)
    if type(obj) is dict:
        assert safe_loads(blob) == obj
    else:
        with pytest.raises(DataError, match="refused to unpickle"):
            safe_loads(blob)


def test_truncated_pickle(tmp_path):
    p = tmp_path / "cut.pickle"
    p.write_bytes(pickle.dumps({"a": [1, 2, 3]})[:-4])
    with pytest.raises(DataError, match="cut.pickle: not a readable pickle"):
        safe_load(p)


def _write(tmp_path, data) -> Path:
    p = tmp_path / "bad_dialsim.pickle"
    p.write_bytes(pickle.dumps(data))
    return p


q_ok = {"questions": {"default": "q?"}, "answer": "a", "options": ["a", "b", "c", "d", "e"]}


@pytest.mark.parametrize("data, record, field", [
    ({"E1": {1: {"script": 5, "date": "d"}}}, "episode E1 session 1", "script"),
    ({"E1": {1: {"script": "A: x", "date": "d", "hard_q": {"past": [{"questions": {"default": "q"}}]}}}},
     "episode E1 session 1 hard_q['past'][0]", "answer"),
    ({"E1": {1: {"script": "A: x", "easy_q": {"ans_w_time": {0: {**q_ok, "questions": "q?"}}}}}},
     "episode E1 session 1 easy_q['ans_w_time'][0]", "questions"),
    ({"E1": {1: {"script": "A: x", "hard_q": {"cur": [{**q_ok, "options": [["a"]]}]}}}},
     "episode E1 session 1 hard_q['cur'][0]", "options[0]"),
])
def test_bad_layout_names_record_and_field(tmp_path, data, record, field):
    p = _write(tmp_path, data)
    with pytest.raises(DataError) as e:
        load_dialsim_file(p)
    assert str(p) in str(e.value) and f"record {record}" in str(e.value) and f"field {field!r}" in str(e.value)


def test_bad_top_level(tmp_path):
    with pytest.raises(DataError, match="expected a dict of episodes, got list"):
        load_dialsim_file(_write(tmp_path, [1, 2]))
    with pytest.raises(DataError, match="record episode E1: expected a dict of sessions"):
        load_dialsim_file(_write(tmp_path, {"E1": "script"}))
    with pytest.raises(DataError, match="expected a list or an object of questions"):
        load_dialsim_file(_write(tmp_path, {"E1": {1: {"script": "A: x", "hard_q": {"past": "q"}}}}))
