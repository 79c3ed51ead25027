"""Issue 23's bad inputs for the loaders and ``score``, one regression test per case.

Each refused input gets a one-line DataError naming the file (and the record / line and field);
nothing here may raise MemoryError, RecursionError or UnicodeDecodeError, or load garbage.
"""
from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.data.bounds import MAX_DEPTH
from ctxbench.data.dialsim import load_dialsim_file
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file
from ctxbench.data.pwc import load_pwc_rows
from ctxbench.data.safe_pickle import safe_loads
from ctxbench.evaluation.evaluator import load_prediction_file
from tests.conftest import run_cli
from ctxbench.config.compose import option_config

SAMPLES = Path(__file__).resolve().parents[1] / "ctxbench" / "samples"


def refused(fn, path: Path, *needles: str) -> str:
    """The DataError message of ``fn(path)``; asserts it is one line naming the file and each needle."""
    with pytest.raises(DataError) as e:
        fn(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


# ---- LoCoMo --------------------------------------------------------------------------------------

def conv(**over):
    c = {"sample_id": "conv-x",
         "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "today",
                          "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
         "qa": [{"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4}]}
    c.update(over)
    return c


def qa(**over):
    return [{"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4, **over}]


def write_json(tmp_path: Path, data, raw: str | None = None) -> Path:
    p = tmp_path / "locomo.json"
    p.write_text(raw if raw is not None else json.dumps(data))
    return p


def test_locomo_without_sessions(tmp_path):
    p = write_json(tmp_path, [conv(conversation={"speaker_a": "A", "speaker_b": "B"})])
    refused(load_locomo_file, p, "record conv-x", "field 'sessions'", "no sessions")


def test_locomo_with_only_empty_turns(tmp_path):
    p = write_json(tmp_path, [conv(conversation={"speaker_a": "A", "speaker_b": "B",
                                                 "session_1": [{"speaker": "A", "text": " "}]})])
    refused(load_locomo_file, p, "record conv-x", "no turn with text")


def test_locomo_with_no_questions(tmp_path):
    refused(load_locomo_file, write_json(tmp_path, [conv(qa=[])]), "record conv-x", "field 'questions'")


def test_locomo_empty_file_list(tmp_path):
    refused(load_locomo_file, write_json(tmp_path, []), "holds no samples")


@pytest.mark.parametrize("over, field", [({"question": ""}, "question"), ({"question": "  "}, "question"),
                                         ({"answer": ""}, "answer"), ({"answer": " \t"}, "answer")])
def test_locomo_empty_question_or_answer(tmp_path, over, field):
    p = write_json(tmp_path, [conv(qa=qa(**over))])
    refused(load_locomo_file, p, "record conv-x qa[0]", f"field {field!r}", "is empty")


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_locomo_nan_answer_is_not_the_gold_nan(tmp_path, const):
    raw = json.dumps([conv()]).replace('"answer": "a"', f'"answer": {const}')
    refused(load_locomo_file, write_json(tmp_path, None, raw), f"{const} is not JSON (at line 1, column")


def test_locomo_deeply_nested(tmp_path):
    p = write_json(tmp_path, None, "[" * 100_000 + "]" * 100_000)
    refused(load_locomo_file, p, f"nested deeper than {MAX_DEPTH} levels")


def test_locomo_not_utf8_names_the_byte_offset(tmp_path):
    raw = json.dumps([conv()]).encode()
    at = raw.index(b"hi")
    p = tmp_path / "locomo.json"
    p.write_bytes(raw[:at] + b"\xff" + raw[at + 1:])
    refused(load_locomo_file, p, "not UTF-8", f"byte offset {at}")


def test_real_locomo_still_loads(shared_data):
    s = load_locomo_file(shared_data / "locomo10.json")
    qs = [q for x in s for q in x.questions]
    assert len(qs) == 1986 and all(isinstance(q.answer, str) and q.answer.strip() for q in qs)
    assert "2022" in {q.answer for q in qs} and s.quirks["non_string_answers"] == 6
    assert {q.answer for q in qs if q.category == 5} == {"Not mentioned in the conversation"}


# ---- PwC -----------------------------------------------------------------------------------------

def pwc(path: Path):
    return load_pwc_rows(option_config("dataset", {"name": "pwc", "path": str(path)}))


def write_lines(tmp_path: Path, lines: list[str], name: str = "rows.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(x + "\n" for x in lines))
    return p


GOOD_ROW = json.dumps({"input": "ctx", "prompt": "p?", "answer": "a"})


@pytest.mark.parametrize("row, field", [({"input": "ctx", "prompt": "p?", "answer": ""}, "answer"),
                                        ({"input": "ctx", "prompt": " ", "answer": "a"}, "prompt"),
                                        ({"input": "", "prompt": "p?", "answer": "a"}, "input")])
def test_pwc_empty_fields(tmp_path, row, field):
    refused(pwc, write_lines(tmp_path, [GOOD_ROW, json.dumps(row)]), "line 2", f"field {field!r}")


def test_pwc_nan_and_deep_and_not_utf8(tmp_path):
    refused(pwc, write_lines(tmp_path, [GOOD_ROW, '{"input": "c", "prompt": "p", "answer": NaN}']),
            "line 2", "NaN is not JSON")
    refused(pwc, write_lines(tmp_path, [GOOD_ROW, '{"input": ' + "[" * 5000 + "]" * 5000 + "}"]),
            "line 2", "nested deeper")
    p = tmp_path / "bad.jsonl"
    p.write_bytes(GOOD_ROW.encode() + b"\n" + b'{"input": "\xc3(", "prompt": "p", "answer": "a"}\n')
    refused(pwc, p, "line 2", f"byte offset {len(GOOD_ROW) + 1 + 11}")


def test_real_pwc_and_samples_still_load(shared_data):
    assert len(pwc(shared_data / "pwc_dev_icae_v2.jsonl")) == 6
    assert len(pwc(SAMPLES / "pwc_sample.jsonl")) == 6


# ---- DialSim pickles -----------------------------------------------------------------------------

def dialsim_data(answer="The oven", script="Nora: the oven came."):
    q = {"questions": {"default": "What came?"}, "answer": answer, "options": ["The oven", "b", "c", "d", "e"]}
    return {"S01E01": {1: {"script": script, "date": "today", "hard_q": {"cur": [q]}, "easy_q": {}}}}


def write_pickle(tmp_path: Path, raw: bytes) -> Path:
    p = tmp_path / "show_dialsim.pickle"
    p.write_bytes(raw)
    return p


@pytest.mark.parametrize("ctor, size", [("bytearray", 2 ** 50), ("bytearray", 2 ** 33), ("bytes", 2 ** 32)])
def test_pickle_huge_constructor_size_is_refused_cheaply(tmp_path, ctor, size):
    raw = f"cbuiltins\n{ctor}\n(I{size}\ntR.".encode()
    assert len(raw) < 50
    t = time.monotonic()
    refused(load_dialsim_file, write_pickle(tmp_path, raw), f"builtins.{ctor}(...) would build more than")
    assert time.monotonic() - t < 1


def test_pickle_huge_size_inside_real_layout(tmp_path):
    raw = pickle.dumps(dialsim_data(script="__BIG__"), protocol=0)
    raw = raw.replace(b"V__BIG__\n", b"cbuiltins\nbytearray\n(I" + str(2 ** 40).encode() + b"\ntR")
    refused(load_dialsim_file, write_pickle(tmp_path, raw), "would build more than")


@pytest.mark.parametrize("where", ["top", "script"])
def test_pickle_deeply_nested_is_refused_not_recursion(tmp_path, where):
    n = 200_000
    deep = b"]" * n + b"a" * (n - 1)
    raw = b"\x80\x02" + deep + b"." if where == "top" else \
        pickle.dumps(dialsim_data(script="__BIG__"), protocol=0).replace(b"V__BIG__\n", deep)
    refused(load_dialsim_file, write_pickle(tmp_path, raw), f"nested deeper than {MAX_DEPTH} levels")


def test_pickle_self_reference_and_shared_amplification(tmp_path):
    loop: list = []
    loop.append(loop)
    refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps({"e": loop})), "nested deeper")
    x: list = ["a" * 1000] * 100
    for _ in range(4):
        x = [x] * 100
    raw = pickle.dumps(x)
    assert len(raw) < 5000
    refused(load_dialsim_file, write_pickle(tmp_path, raw), "builds more than")


def test_pickle_error_message_is_short_for_huge_and_deep_values(tmp_path):
    deep: list = []
    for _ in range(60):
        deep = [deep, list(range(1000))]
    msg = refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps(dialsim_data(script=deep))),
                  "field 'script'", "expected a string, got list")
    assert len(msg) < 300


@pytest.mark.parametrize("answer", [float("nan"), float("inf"), "", "  "])
def test_pickle_nan_or_empty_answer(tmp_path, answer):
    refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps(dialsim_data(answer=answer))), "field 'answer'")


def test_pickle_keys_that_collide_as_ids(tmp_path):
    data = dialsim_data()
    data["S01E01"]["1"] = data["S01E01"][1]
    refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps(data)), "duplicate question id")


def test_pickle_without_episodes_or_text(tmp_path):
    refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps({})), "no sessions")
    refused(load_dialsim_file, write_pickle(tmp_path, pickle.dumps(dialsim_data(script=""))), "field 'script'", "is empty")


def test_pickle_admitted_builtins_still_load():
    import collections

    for o in (collections.OrderedDict(a=1), collections.defaultdict(list, {"a": [1]}), {1, 2}, frozenset([1]),
              bytearray(b"ab"), b"ab", 1 + 2j, {"a": [1, (2.5, None)]}):
        for proto in (0, 2, 4, 5):
            got = safe_loads(pickle.dumps(o, protocol=proto))
            assert got == o and type(got) is type(o)


def test_shipped_dialsim_sample_still_loads():
    s = load_dialsim_file(SAMPLES / "dialsim_sample.pickle")
    assert len(s[0].questions) == 5


# ---- score predictions ---------------------------------------------------------------------------

PRED = {"id": "a", "prediction": "p", "answer": "x", "category": 1}


def write_preds(tmp_path: Path, rows: list) -> Path:
    return write_lines(tmp_path, [r if isinstance(r, str) else json.dumps(r) for r in rows], "predictions.jsonl")


def test_score_duplicate_ids_name_both_lines(tmp_path):
    p = write_preds(tmp_path, [PRED, {**PRED, "id": "b"}, "", {**PRED}])
    refused(load_prediction_file, p, "line 4", "field 'id'", "first on line 1")
    p = write_preds(tmp_path, [{**PRED, "id": 7}, {**PRED, "id": "7"}])
    refused(load_prediction_file, p, "line 2", "first on line 1")


@pytest.mark.parametrize("answer", [None, [], ["x"], {}, 1.5, True, "", " "])
def test_score_answer_must_be_a_string(tmp_path, answer):
    p = write_preds(tmp_path, [PRED, {**PRED, "id": "b", "answer": answer}])
    refused(load_prediction_file, p, "line 2", "field 'answer'")


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_score_nan_and_infinity_are_refused(tmp_path, const):
    p = write_preds(tmp_path, [PRED, json.dumps({**PRED, "id": "b"}).replace('"x"', const)])
    refused(load_prediction_file, p, "line 2", "is not JSON")


def test_score_blank_lines_integers_and_line_separators_load(tmp_path):
    p = write_preds(tmp_path, ["", PRED, "   ", {"id": 2, "prediction": 2022, "answer": 2022, "category": 2},
                               {**PRED, "id": "c", "answer": "x\u2028y"}])
    recs = load_prediction_file(p)
    assert [r["answer"] for r in recs] == ["x", "2022", "x\u2028y"] and recs[1]["prediction"] == "2022"


def test_score_torn_last_line_is_named(tmp_path):
    p = write_preds(tmp_path, [PRED, '{"id": "b", "predic'])
    refused(load_prediction_file, p, "line 2", "malformed JSON")


def test_score_not_utf8_is_one_line_with_offset(tmp_path):
    first = json.dumps(PRED).encode() + b"\n"
    p = tmp_path / "predictions.jsonl"
    p.write_bytes(first + b'{"id": "b", "prediction": "\xff", "answer": "x", "category": 1}\n')
    refused(load_prediction_file, p, "line 2", f"byte offset {len(first) + 27}")
    r = run_cli("score", f"predictions={p}", f"hydra.run.dir={tmp_path / 'out'}", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"byte offset {len(first) + 27}" in r.stderr.strip().splitlines()[-1]


def test_jsonl_line_longer_than_the_bound(tmp_path, monkeypatch):
    import ctxbench.data.records as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(records, "CHUNK_BYTES", 7)
    p = write_lines(tmp_path, [GOOD_ROW, json.dumps({"input": "x" * 200, "prompt": "p", "answer": "a"})])
    refused(pwc, p, "line 2", "line longer than 100 bytes")
    assert len(pwc(write_lines(tmp_path, [GOOD_ROW, GOOD_ROW]))) == 2  # lines split across chunks


# ---- found by the bad-input sweep (tests/test_bad_input_sweep.py) after the first fixes ----------

def test_locomo_speakers_must_be_named_and_turns_by_them(tmp_path):
    c = conv()
    c["conversation"]["speaker_a"] = " "
    refused(load_locomo_file, write_json(tmp_path, [c]), "conversation.speaker_a", "is empty")
    c = conv()
    c["conversation"]["session_1"][0]["speaker"] = "Zed"
    refused(load_locomo_file, write_json(tmp_path, [c]), "session_1[0]", "'speaker'",
            "speaker 'Zed' is neither speaker_a 'A' nor speaker_b 'B'")


def test_real_locomo_duplicate_questions_are_kept_and_counted(shared_data):
    """locomo10.json asks 12 questions twice: both are kept (own ids), and the quirk says how many."""
    samples = load_locomo_file(shared_data / "locomo10.json")
    assert samples.quirks["duplicate_questions"] == 12
    assert sum(len(s.questions) for s in samples) == 1986


@pytest.mark.parametrize("where", ["category", "answer"])
def test_numbers_past_the_int_conversion_limit_are_refused(tmp_path, where):
    """json.loads raises a bare ValueError for an integer of more than 4300 digits."""
    raw = json.dumps([conv(qa=qa(**{where: 7}))]).replace(": 7", ": " + "9" * 5000)
    refused(load_locomo_file, write_json(tmp_path, None, raw), "unreadable number", "4300")
    p = tmp_path / "preds.jsonl"
    p.write_text('{"id": "a", "prediction": "x", "answer": ' + "9" * 5000 + ', "category": 1}\n')
    refused(load_prediction_file, p, "line 1", "unreadable number")


def test_a_huge_prediction_is_refused_before_scoring(tmp_path):
    """A 64 MiB prediction hit the metrics' regex time limit (a traceback) before."""
    from ctxbench.data.bounds import MAX_ANSWER_CHARS

    p = tmp_path / "preds.jsonl"
    p.write_text(json.dumps({"id": "a", "prediction": "x " * MAX_ANSWER_CHARS, "answer": "x", "category": 1}) + "\n")
    refused(load_prediction_file, p, "line 1", "'prediction'", f"over the {MAX_ANSWER_CHARS}-character limit")


def test_a_json_string_over_the_limit_is_refused(tmp_path, monkeypatch):
    from ctxbench.data import bounds

    monkeypatch.setattr(bounds, "MAX_STRING_CHARS", 1000)
    c = conv()
    c["conversation"]["session_1"][0]["text"] = "x" * 1001
    refused(load_locomo_file, write_json(tmp_path, [c]), "a string of 1001 characters", "1000-character limit")
