"""LoCoMo loader on the official locomo10.json: counts, quirks, captions, subsetting, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.categories import ADVERSARIAL_GOLD, parse_categories
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file, parse_evidence_id, select, stats
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def locomo(shared_data):
    return load_locomo_file(shared_data / "locomo10.json")


def build(**kw):
    return registry.build("dataset", option_config("dataset", {"name": "locomo", **kw}))


def test_official_counts(locomo):
    st = stats(locomo)
    assert (st["samples"], st["sessions"], st["turns"], st["questions"]) == (10, 272, 5882, 1986)
    assert {k: v["n"] for k, v in st["by_category"].items()} == {
        "multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841, "adversarial": 446}
    assert {v["id"]: k for k, v in st["by_category"].items()} == {
        1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    q = st["quirks"]
    assert q["adversarial_answer_only"] == 444 and q["adversarial_with_answer"] == 2
    assert q["malformed_evidence"] == 6 and q["non_string_answers"] == 6
    assert q["date_keys_without_session"] == 16  # conv-26: 35 date keys, 19 sessions
    assert q["image_turns"] == 1226


def test_sessions_not_dates(locomo):
    conv26 = next(s for s in locomo if s.history.id == "conv-26")
    assert len(conv26.history.sessions) == 19
    assert [s.id for s in conv26.history.sessions][:3] == ["session_1", "session_2", "session_3"]
    assert conv26.history.sessions[0].date == "1:56 pm on 8 May, 2023"
    assert conv26.history.speakers == ["Caroline", "Melanie"]
    assert conv26.history.sessions[0].turns[0].id == "D1:1"


def test_answers_are_strings_and_adversarial_gold(locomo):
    qs = [q for s in locomo for q in s.questions]
    assert all(isinstance(q.answer, str) and q.answer for q in qs)
    assert any(q.answer == "2022" for q in qs)  # int 2022 in the file
    adv = [q for q in qs if q.category == 5]
    assert len(adv) == 446 and all(q.answer == ADVERSARIAL_GOLD for q in adv)
    assert all(q.adversarial_answer for q in adv)
    both = [q for q in adv if "raw_answer" in q.meta]
    assert len(both) == 2 and {q.meta["raw_answer"] for q in both} == {"No"}
    assert all(q.adversarial_answer is None for q in qs if q.category != 5)


def test_malformed_evidence_kept_raw(locomo):
    ev = [e for s in locomo for q in s.questions for e in q.evidence]
    for bad in ("D8:6; D9:17", "D", "D:11:26", "D9:1 D4:4 D4:6"):
        assert bad in ev
    assert parse_evidence_id("D8:6; D9:17") == [(8, 6), (9, 17)]
    assert parse_evidence_id("D:11:26") == [(11, 26)]
    assert parse_evidence_id("D") == []


def test_image_caption_in_text(locomo):
    turn = locomo[0].history.sessions[0].turns[4]  # conv-26 D1:5 carries a photo
    assert turn.id == "D1:5"
    assert turn.text == ("The transgender stories were so inspiring! I was so happy and thankful for all the support."
                         " [shares a photo: a photo of a dog walking past a wall with a painting of a woman]")
    assert turn.meta["raw_text"].endswith("support.") and turn.meta["img_url"]
    assert "[shares a photo: a photo of a dog walking" in locomo[0].history.render()


def test_question_fields(locomo):
    q = locomo[0].questions[0]
    assert q.id == "conv-26-q0" and q.category == 2 and q.category_name == "temporal"
    assert q.answer == "7 May 2023" and q.evidence == ["D1:3"] and q.meta["conversation"] == "conv-26"


def test_subsetting_through_registry(shared_data):
    path = str(shared_data / "locomo10.json")
    one = build(path=path, conversations=["conv-26"], limit=20)
    assert len(one) == 1 and one[0].history.id == "conv-26" and len(one[0].questions) == 20
    assert len(one[0].history.sessions) == 19  # sessions stay whole
    cats = build(path=path, categories=[1, "temporal"])
    assert {q.category for s in cats for q in s.questions} == {1, 2}
    assert sum(len(s.questions) for s in cats) == 282 + 321
    lim = build(path=path, categories=["adversarial"], limit=3)
    assert [len(s.questions) for s in lim] == [3] * 10
    assert all(q.category == 5 for s in lim for q in s.questions)
    ids = [q.id for q in build(path=path, conversations=["conv-30"])[0].questions]
    assert ids[0] == "conv-30-q0"  # ids keep the file index after subsetting
    assert ids == [q.id for q in build(path=path, conversations=["conv-30"], categories=[1, 2, 3, 4, 5])[0].questions]


def test_subsetting_errors(locomo):
    with pytest.raises(DataError, match="unknown conversation.*conv-99"):
        select(locomo, ["conv-99"])
    with pytest.raises(DataError, match="unknown LoCoMo category 'hard'"):
        select(locomo, categories=["hard"])
    assert parse_categories(["Multi-Hop", "4", "single_hop", "opendomain"]) == {1, 3, 4}
    assert parse_categories(None) is None


def test_shipped_sample():
    s = registry.build("dataset", load_conf_file(REPO / "conf/dataset/locomo_sample.yaml"))
    st = stats(s)
    assert st["samples"] == 2 and {v["id"] for v in st["by_category"].values()} == {1, 2, 3, 4, 5}
    assert st["quirks"]["adversarial_answer_only"] == 3 and st["quirks"]["non_string_answers"] == 1
    assert "[shares a photo: a photo of a small blue clay bowl" in s[0].history.render()


def test_default_path_missing_tells_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_DATA", str(tmp_path))
    with pytest.raises(DataError) as e:
        build()
    msg = str(e.value)
    assert str(tmp_path / "downloads" / "locomo10.json") in msg
    assert "python -m ctxbench data download locomo" in msg and "dataset.path=" in msg


def _conv(**over):
    conv = {"sample_id": "conv-x",
            "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "today",
                             "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
            "qa": [{"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4}]}
    conv.update(over)
    return conv


def _write(tmp_path, data, raw=None):
    p = tmp_path / "bad.json"
    p.write_text(raw if raw is not None else json.dumps(data))
    return p


@pytest.mark.parametrize("data, record, field", [
    ([_conv(qa=[{"answer": "a", "evidence": [], "category": 4}])], "conv-x qa[0]", "question"),
    ([_conv(qa=[{"question": "q", "answer": "a", "evidence": [], "category": "two"}])], "conv-x qa[0]", "category"),
    ([_conv(qa=[{"question": "q", "evidence": [], "category": 2}])], "conv-x qa[0]", "answer"),
    ([_conv(qa=[{"question": "q", "answer": ["a"], "evidence": [], "category": 2}])], "conv-x qa[0]", "answer"),
    ([_conv(qa=[{"question": "q", "answer": "a", "evidence": [3], "category": 2}])], "conv-x qa[0]", "evidence[0]"),
    ([_conv(qa=[{"question": "q", "answer": "a", "evidence": [], "category": 9}])], "conv-x qa[0]", "category"),
    ([_conv(conversation={"speaker_a": "A", "speaker_b": "B", "session_1": [{"speaker": "A", "text": 5}]})],
     "conv-x session_1[0]", "text"),
    ([_conv(conversation={"speaker_a": "A", "session_1": []})], "conv-x", "conversation.speaker_b"),
    ([{"conversation": {}, "qa": []}], "index 0", "sample_id"),
    ([_conv(), _conv()], "conv-x", "sample_id"),
])
def test_bad_records_name_file_record_field(tmp_path, data, record, field):
    p = _write(tmp_path, data)
    with pytest.raises(DataError) as e:
        load_locomo_file(p)
    assert str(p) in str(e.value) and f"record {record}" in str(e.value) and f"field {field!r}" in str(e.value)


def test_malformed_json_and_wrong_top_level(tmp_path):
    p = _write(tmp_path, None, raw='[{"sample_id": "x",\n  "qa": [}]')
    with pytest.raises(DataError, match=r"bad.json: malformed JSON .*line 2"):
        load_locomo_file(p)
    p = _write(tmp_path, {"sample_id": "x"})
    with pytest.raises(DataError, match="expected a JSON list of conversations, got dict"):
        load_locomo_file(p)
