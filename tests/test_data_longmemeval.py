"""dataset=longmemeval: the loader on the shipped sample, its invariants (each bad file fails in one line
naming file, question and field), the sessions-after-question drop, subsetting, distinct sessions, the
LongMemEval date format, and the question's date in the rendered answer prompt."""
from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.types import Question
from ctxbench.data.dates import parse_session_date, question_time
from ctxbench.data.errors import DataError
from ctxbench.data.longmemeval import (QUESTION_TYPES, distinct_sessions, load_longmemeval_file, release_of,
                                       release_path, select)
from ctxbench.data.records import iter_json_array
from ctxbench.qa import get_prompt
from ctxbench.qa.forms import without_gold

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "ctxbench" / "samples" / "longmemeval_sample.json"
RAW = json.loads(SAMPLE.read_text())


@pytest.fixture(scope="module")
def lme():
    return load_longmemeval_file(SAMPLE)


def write(tmp_path: Path, entries: list, name: str = "lme.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(entries))
    return p


def entry(i: int = 7) -> dict:
    return copy.deepcopy(RAW[i])  # demo_multi_novels: two evidence sessions, an integer answer


# ---- the sample ------------------------------------------------------------------------------------

def test_the_sample_has_every_type_abstention_and_shared_sessions(lme):
    assert len(lme) == 13 and all(len(s.questions) == 1 and s.history.id == s.questions[0].id for s in lme)
    types = Counter(s.questions[0].category for s in lme)
    assert set(types) == set(QUESTION_TYPES) and min(types.values()) >= 2
    abstention = [s.history.id for s in lme if s.questions[0].meta["abstention"]]
    assert abstention == ["demo_ssu_cat_abs", "demo_temporal_violin_abs"]
    assert {s.questions[0].category for s in lme if s.questions[0].meta["abstention"]} == \
        {"single-session-user", "temporal-reasoning"}  # abstention keeps its type
    assert all(3 <= len(s.history.sessions) <= 4 and all(2 <= len(x.turns) <= 4 for x in s.history.sessions)
               for s in lme)
    assert distinct_sessions(lme) == {"histories": 13, "session_slots": 39, "distinct_sessions": 19, "distinct_dated_sessions": 19,
                                      "turn_slots": 80, "distinct_turns": 40, "repeated_session_share": 0.5128}
    # a repeated session is the same session (id, date, turns) in every haystack
    seen = {}
    for s in lme:
        for x in s.history.sessions:
            assert seen.setdefault(x.id, (x.date, [(t.speaker, t.text) for t in x.turns])) == \
                (x.date, [(t.speaker, t.text) for t in x.turns])
    pairs = sum(len(x.turns) // 2 for s in lme for x in s.history.sessions)
    assert pairs <= 40  # mem0's extraction calls on the sample (the 10-minute CPU bar)
    assert dict(+lme.quirks) == {"non_string_answers": 1}


def test_sample_question_fields(lme):
    s = next(s for s in lme if s.history.id == "demo_multi_novels")
    q = s.questions[0]
    assert q.answer == "5" and q.category == q.category_name == "multi-session"
    assert q.evidence == ["answer_novels_1_1", "answer_novels_2_1"]
    assert q.meta == {"question_date": "2023/05/07 (Sun) 21:00", "evidence_sessions": ["answer_novels_1", "answer_novels_2"],
                      "abstention": False, "release": "sample",
                      "retrieval_gold": {"turns": ["answer_novels_1_1", "answer_novels_2_1"],
                                         "sessions": ["answer_novels_1", "answer_novels_2"], "has_target": True}}
    assert s.history.speakers == ["user", "assistant"]
    assert [t.id for t in s.history.sessions[0].turns] == ["answer_novels_1_1", "answer_novels_1_2"]
    assert s.history.sessions[0].turns[0].meta == {"has_answer": True} and s.history.sessions[0].turns[1].meta == {}
    haiku = next(s for s in lme if s.history.id == "demo_ssa_haiku").questions[0]
    assert haiku.evidence == ["answer_haiku_1_2"]  # an assistant turn


def test_no_history_holds_a_session_dated_after_its_question_and_sessions_are_in_time_order(lme):
    for s in lme:
        asked = question_time(s.questions[0])
        times = [parse_session_date(x.date) for x in s.history.sessions]
        assert times == sorted(times) and all(t <= asked for t in times), s.history.id


def test_registered_config_and_subsetting(lme):
    got = registry.build("dataset", option_config("dataset", {"name": "longmemeval_sample"}))
    assert [s.history.id for s in got] == [s.history.id for s in lme]
    cut = registry.build("dataset", option_config("dataset", {"name": "longmemeval_sample",
                                                              "question_types": ["temporal-reasoning", "abstention"],
                                                              "limit": 3}))
    assert [s.history.id for s in cut] == ["demo_ssu_cat_abs", "demo_temporal_pottery", "demo_temporal_violin_abs"]
    assert [s.history.id for s in select(lme, questions=["demo_ku_run", "demo_ssu_dog"])] == ["demo_ssu_dog", "demo_ku_run"]
    with pytest.raises(DataError, match=r"field 'dataset.questions': unknown question id\(s\) \['nope'\]"):
        select(lme, questions=["nope"])
    with pytest.raises(DataError, match=r"field 'dataset.question_types': unknown question type\(s\) \['temporal'\]"):
        select(lme, question_types=["temporal"])


def test_release_files(tmp_path):
    assert [release_of(Path(n)) for n in ("longmemeval_s_cleaned.json", "longmemeval_m.json",
                                         "longmemeval_oracle.json", "longmemeval_sample.json")] == \
        ["s", "m", "oracle", "sample"]
    (tmp_path / "longmemeval_m.json").write_text(SAMPLE.read_text())
    assert release_path(str(tmp_path), "m") == tmp_path / "longmemeval_m.json"
    with pytest.raises(DataError, match=r"longmemeval_s_cleaned.json: not found \(release=s: longmemeval_s_cleaned.json "
                                        r"or longmemeval_s.json\); download it with"):
        release_path(str(tmp_path), "s")
    got = registry.build("dataset", option_config("dataset", {"name": "longmemeval", "path": str(tmp_path),
                                                              "release": "m"}))
    assert {s.questions[0].meta["release"] for s in got} == {"m"}


# ---- dates -----------------------------------------------------------------------------------------

def test_longmemeval_dates_parse():
    assert parse_session_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)
    assert parse_session_date("2023/05/20 (Sat)") == datetime(2023, 5, 20)
    assert question_time(Question("q", "?", "a", meta={"question_date": "2023/05/20 (Sat) 02:21"})) == \
        datetime(2023, 5, 20, 2, 21)
    assert question_time(Question("q", "?", "a")) is None


# ---- invariants: one line naming file, question and field --------------------------------------------

def _bad(mutate):
    e = entry()
    mutate(e)
    return e


BAD = {
    "unequal haystack lists": (lambda e: e["haystack_dates"].pop(),
                               "field 'haystack_dates': has 2 entries but haystack_session_ids has 3"),
    "bad role": (lambda e: e["haystack_sessions"][1][0].__setitem__("role", "system"),
                 "field 'haystack_sessions[1][0].role': role must be user or assistant, got 'system'"),
    "content not a string": (lambda e: e["haystack_sessions"][0][1].__setitem__("content", 3),
                             "field 'haystack_sessions[0][1].content': expected a string, got int"),
    "unknown answer session": (lambda e: e["answer_session_ids"].append("answer_elsewhere"),
                               "field 'answer_session_ids[2]': session 'answer_elsewhere' is not in haystack_session_ids"),
    "bad question_type": (lambda e: e.__setitem__("question_type", "multi-hop"),
                          "field 'question_type': question_type 'multi-hop' is not one of single-session-user"),
    "unparsable question_date": (lambda e: e.__setitem__("question_date", "next Tuesday"),
                                 "field 'question_date': cannot be read as a date ('next Tuesday'"),
    "unparsable haystack date": (lambda e: e["haystack_dates"].__setitem__(1, "soon"),
                                 "field 'haystack_dates[1]': cannot be read as a date ('soon'"),
    "evidence after question_date": (lambda e: e["haystack_dates"].__setitem__(2, "2023/05/09 (Tue) 10:00"),
                                     "field 'haystack_dates[2]': evidence session 'answer_novels_2' is dated "
                                     "'2023/05/09 (Tue) 10:00', after question_date '2023/05/07 (Sun) 21:00'"),
    "missing answer": (lambda e: e.pop("answer"), "field 'answer': missing required field"),
    "has_answer not a bool": (lambda e: e["haystack_sessions"][0][0].__setitem__("has_answer", "yes"),
                              "field 'haystack_sessions[0][0].has_answer': expected"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_entry_fails_in_one_line_naming_file_question_and_field(case, tmp_path):
    mutate, message = BAD[case]
    path = write(tmp_path, [entry(0), _bad(mutate)])
    with pytest.raises(DataError) as e:
        load_longmemeval_file(path)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path}, record demo_multi_novels, "), line
    assert message in line, line


def test_duplicate_question_id(tmp_path):
    path = write(tmp_path, [entry(), entry()])
    with pytest.raises(DataError, match=r"demo_multi_novels.*field 'question_id': duplicate question_id"):
        load_longmemeval_file(path)


def test_not_a_list_and_malformed_json(tmp_path):
    with pytest.raises(DataError, match="expected a JSON list"):
        load_longmemeval_file(write(tmp_path, {"question_id": "x"}))
    p = tmp_path / "cut.json"
    p.write_text(SAMPLE.read_text()[:5000])
    with pytest.raises(DataError, match=r"record index \d+.*malformed JSON"):
        load_longmemeval_file(p)
    p.write_text('[{"question_id": NaN}]')
    with pytest.raises(DataError, match="NaN is not JSON"):
        load_longmemeval_file(p)


# ---- odd but valid: handled and counted --------------------------------------------------------------

def test_a_filler_session_after_the_question_is_dropped_and_counted(tmp_path):
    e = entry()
    e["haystack_dates"][1] = "2023/05/08 (Mon) 09:00"  # filler_basil, a day after the question
    got = load_longmemeval_file(write(tmp_path, [e]))
    assert [x.id for x in got[0].history.sessions] == ["answer_novels_1", "answer_novels_2"]
    assert got.quirks["sessions_after_question"] == 1
    # dataset.after_question=keep: LongMemEval's own reading, every haystack session (in time order)
    kept = load_longmemeval_file(write(tmp_path, [e]), keep_after=True)
    assert len(kept[0].history.sessions) == 3 and kept[0].history.sessions[-1].id == e["haystack_session_ids"][1]
    assert kept.quirks["sessions_after_question"] == 0 and kept.quirks["sessions_after_question_kept"] == 1


def test_same_day_evidence_after_the_question_time_is_kept_and_counted(tmp_path):
    e = entry()
    e["haystack_dates"][2] = "2023/05/07 (Sun) 22:00"  # evidence, an hour after the question
    got = load_longmemeval_file(write(tmp_path, [e]))
    assert "answer_novels_2" in [x.id for x in got[0].history.sessions]
    assert got.quirks["evidence_after_question_same_day"] == 1


def test_unsorted_haystack_is_put_in_time_order_and_duplicates_are_kept_once(tmp_path):
    e = entry()
    for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        e[k] = e[k][::-1] + [e[k][1]]  # oracle lists its sessions unsorted; S repeats 13 filler sessions
    e["haystack_dates"][-1] = "2023/03/01 (Wed) 08:00"
    got = load_longmemeval_file(write(tmp_path, [e]))
    assert [x.id for x in got[0].history.sessions] == ["filler_basil", "answer_novels_1", "answer_novels_2"]
    assert got[0].history.sessions[0].date == "2023/03/01 (Wed) 08:00"  # the earlier copy
    assert got.quirks["sessions_reordered"] == 1 and got.quirks["duplicate_sessions"] == 1
    e["haystack_sessions"][-1] = [{"role": "user", "content": "other"}]
    with pytest.raises(DataError, match=r"field 'haystack_session_ids\[\d\]': session 'filler_basil' is listed twice "
                                        "with different turns"):
        load_longmemeval_file(write(tmp_path, [e]))


def test_a_session_repeated_across_questions_shares_its_turns(lme):
    basil = [x for s in lme for x in s.history.sessions if x.id == "filler_basil"]
    assert len(basil) >= 3 and all(x.turns is basil[0].turns for x in basil)


def test_streaming_reader_reads_entries_larger_than_its_chunk(tmp_path, monkeypatch):
    import ctxbench.data.records as records

    monkeypatch.setattr(records, "CHUNK_BYTES", 64)
    got = [(i, v["question_id"]) for i, v in iter_json_array(SAMPLE)]
    assert got == [(i, r["question_id"]) for i, r in enumerate(RAW)]
    p = tmp_path / "x.json"
    p.write_text(' [ {"a": "é"} , {"b": [1, 2]} ] \n')
    assert [v for _, v in iter_json_array(p)] == [{"a": "é"}, {"b": [1, 2]}]
    p.write_text("[]")
    assert list(iter_json_array(p)) == []
    p.write_text('[{"a": 1}] x')
    with pytest.raises(DataError, match="extra data after the closing"):
        list(iter_json_array(p))


# ---- the question's date reaches the answerer -----------------------------------------------------------

def test_temporal_questions_see_the_question_date_in_the_rendered_prompt(lme):
    from ctxbench.config.schemas import load_conf_file
    from test_dataset_sessions import Recording

    s = next(s for s in lme if s.history.id == "demo_temporal_pottery")
    q = s.questions[0]
    cfg = load_conf_file(ROOT / "ctxbench" / "conf" / "memory" / "full_context.yaml")
    for prompt in ("brief", "longmemeval"):
        llm = Recording()
        system = registry.build("memory", cfg, llm=llm)
        system.use_prompt(get_prompt(prompt))
        system.ingest(s.history)
        system.answer(q)
        assert "2023/04/22 (Sat) 18:00" in llm.prompts[-1] and "2023/04/08 (Sat) 17:35" in llm.prompts[-1]
    assert get_prompt("longmemeval").messages(q, "H")[0]["content"].endswith(
        "Current Date: 2023/04/22 (Sat) 18:00\nQuestion: How many days ago did I go to my first pottery class?\nAnswer:")
    told = without_gold(q)
    assert told.meta["question_date"] == q.meta["question_date"]
    assert "evidence_sessions" not in told.meta and "abstention" not in told.meta and told.evidence == []
    assert "retrieval_gold" in q.meta and "retrieval_gold" not in told.meta  # its evidence turns are gold too


# ---- data stats / download -------------------------------------------------------------------------------

def test_data_stats_prints_types_and_distinct_sessions_and_download_fails_offline(tmp_path):
    from conftest import run_cli

    p = run_cli("data", "stats", "longmemeval_sample", env={"HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "| temporal-reasoning | temporal-reasoning | 2 |" in p.stdout
    assert "| 13 | 39 | 19 | 19 | 80 | 40 | 51.3% |" in p.stdout
    p = run_cli("data", "download", "longmemeval", f"dest={tmp_path}", env={"HF_HUB_OFFLINE": "1"})
    err = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(err) == 1 and "longmemeval_s_cleaned.json: is a hub file but the hub is offline" \
        in err[0], p.stderr
