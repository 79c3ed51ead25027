"""Property-based bad input: malformed LoCoMo / PwC / DialSim records and prediction files.

Every generated input either loads (odd-but-valid records are handled) or raises DataError with a
message naming the file — never any other exception (no bare traceback for the user).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.data.dialsim import load_dialsim_file
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file
from ctxbench.data.pwc import load_pwc_rows
from ctxbench.evaluate import load_prediction_file

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=16),
                    st.text(max_size=12))
json_values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), c, max_size=3)),
                           max_leaves=8)

turn = st.fixed_dictionaries({"speaker": st.one_of(st.text(max_size=5), scalars),
                              "dia_id": st.one_of(st.just("D1:1"), scalars),
                              "text": st.one_of(st.text(max_size=20), scalars)},
                             optional={"blip_caption": scalars, "img_url": json_values})
qa = st.fixed_dictionaries({"question": st.one_of(st.text(max_size=20), scalars),
                            "category": st.one_of(st.integers(0, 7), scalars)},
                           optional={"answer": json_values, "adversarial_answer": json_values,
                                     "evidence": st.one_of(st.lists(st.text(max_size=8), max_size=3), json_values)})
conversation = st.fixed_dictionaries({
    "sample_id": st.one_of(st.text(min_size=1, max_size=6), scalars),
    "conversation": st.one_of(
        st.fixed_dictionaries({"speaker_a": st.text(max_size=5), "speaker_b": st.text(max_size=5),
                               "session_1": st.one_of(st.lists(turn, max_size=3), json_values),
                               "session_1_date_time": st.one_of(st.text(max_size=10), scalars)}),
        json_values),
    "qa": st.one_of(st.lists(qa, max_size=3), json_values)})


def check(fn, path: Path) -> None:
    try:
        fn(path)
    except DataError as e:
        assert str(path) in str(e) or path.name in str(e), str(e)


@SETTINGS
@given(st.one_of(st.lists(conversation, max_size=2), json_values))
def test_locomo_records(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("locomo") / "locomo.json"
    p.write_text(json.dumps(data))
    check(load_locomo_file, p)


@SETTINGS
@given(st.binary(max_size=200))
def test_locomo_bytes(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("locomo") / "garbage.json"
    p.write_bytes(raw)
    check(load_locomo_file, p)


def _pwc_load(path: Path):
    from omegaconf import OmegaConf

    return load_pwc_rows(OmegaConf.create({"name": "pwc", "path": str(path)}))


@SETTINGS
@given(st.lists(st.one_of(st.fixed_dictionaries({"input": json_values, "prompt": json_values, "answer": json_values}),
                          json_values, st.text(max_size=30)), min_size=1, max_size=4))
def test_pwc_rows(tmp_path_factory, rows):
    p = tmp_path_factory.mktemp("pwc") / "rows.jsonl"
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    check(_pwc_load, p)


dialsim_q = st.fixed_dictionaries({"questions": st.one_of(st.fixed_dictionaries({"default": st.text(max_size=10)}),
                                                          json_values),
                                   "answer": json_values},
                                  optional={"options": st.one_of(st.lists(st.text(max_size=5), max_size=6), json_values)})
dialsim = st.dictionaries(st.text(min_size=1, max_size=4), st.one_of(
    st.dictionaries(st.text(min_size=1, max_size=3), st.fixed_dictionaries(
        {"script": st.one_of(st.text(max_size=40), scalars), "date": st.one_of(st.text(max_size=8), scalars),
         "hard_q": st.one_of(st.dictionaries(st.text(max_size=6), st.lists(dialsim_q, max_size=2), max_size=2),
                             json_values),
         "easy_q": st.one_of(st.dictionaries(st.text(max_size=6), st.dictionaries(st.text(max_size=3), dialsim_q,
                                                                                  max_size=2), max_size=2),
                             json_values)}), max_size=2),
    json_values), max_size=2)


@SETTINGS
@given(st.one_of(dialsim, json_values), st.sampled_from(["multi_choice", "open_ended"]))
def test_dialsim_records(tmp_path_factory, data, fmt):
    p = tmp_path_factory.mktemp("dialsim") / "show_dialsim.pickle"
    p.write_bytes(pickle.dumps(data, protocol=2))
    check(lambda path: load_dialsim_file(path, fmt=fmt), p)


@SETTINGS
@given(st.binary(max_size=120))
def test_dialsim_garbage_bytes(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("dialsim") / "bad_dialsim.pickle"
    p.write_bytes(raw)
    check(load_dialsim_file, p)


pred_line = st.one_of(
    st.fixed_dictionaries({"id": json_values, "prediction": json_values, "answer": json_values,
                           "category": json_values}, optional={"adversarial_answer": json_values}),
    json_values, st.text(max_size=30))


@SETTINGS
@given(st.lists(pred_line, min_size=0, max_size=4))
def test_prediction_files(tmp_path_factory, lines):
    p = tmp_path_factory.mktemp("pred") / "predictions.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    check(load_prediction_file, p)
