"""Property-based bad input: malformed LoCoMo / PwC / DialSim records and pickles, prediction files.

Every generated input either raises a DataError whose message is ONE line naming the file (and the
record or line where the fault is in one), or loads a value that passes the dataset's invariants —
checked here independently of :func:`ctxbench.data.invariants.check_samples` (:func:`assert_loaded`),
so a loader that let garbage through would fail. Never any other exception (no bare traceback).

Generated on top of the plain malformed values: NaN/Infinity, empty and blank strings, duplicate
ids, deep nesting, non-UTF-8 bytes, huge size arguments and shared-object amplification in pickles.
``OUTCOMES`` counts, per test, how many inputs were refused and how many loaded; run with ``-s`` to
see the table (or ``--hypothesis-show-statistics`` for hypothesis's own counts).
"""
from __future__ import annotations

import json
import math
import pickle
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.data.categories import LOCOMO_CATEGORIES
from ctxbench.data.dialsim import load_dialsim_file
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file
from ctxbench.data.pwc import load_pwc_rows
from ctxbench.evaluation.evaluator import load_prediction_file
from ctxbench.config.compose import option_config

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
OUTCOMES: dict[str, Counter] = defaultdict(Counter)
NON_FINITE_TEXT = {"nan", "inf", "-inf", "infinity", "-infinity"}


@pytest.fixture(scope="module", autouse=True)
def report_outcomes():
    yield
    print("\nbad-input properties (refused / loaded):")
    for name, c in sorted(OUTCOMES.items()):
        print(f"  {name}: {c['refused']} refused, {c['loaded']} loaded")


# ---- strategies ----------------------------------------------------------------------------------

words = st.text(alphabet="abcdefghijklm opqrstuvwxyz", max_size=12)  # no "nan"/"inf" by chance
texts = st.text(alphabet="abcdefghijklmopqrstuvwxyz", min_size=1, max_size=12)  # non-blank
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=16),
                    st.text(max_size=12))
nasty = st.one_of(st.sampled_from([float("nan"), float("inf"), float("-inf"), "", " ", "\t\n", 2 ** 70, -(2 ** 63),
                                   "two\nlines", "x" * 5000, " " * 5000]),
                  st.text(alphabet=" \t\n\u00a0", max_size=3))
json_values = st.recursive(st.one_of(scalars, nasty),
                           lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=8), c,
                                                                                        max_size=3)),
                           max_leaves=8)


class Deep:
    """A placeholder written as ``n`` nested JSON lists (json.dumps itself would recurse)."""

    def __init__(self, n: int):
        self.n = n


deep = st.builds(Deep, st.integers(50, 3000))


def maybe(good: st.SearchStrategy, bad: st.SearchStrategy = st.one_of(nasty, json_values, deep),
          one_in: int = 12) -> st.SearchStrategy:
    """``good``, except about one draw in ``one_in`` is a malformed value (a residue, not an end of the
    range: hypothesis favours the ends of integer ranges)."""
    return st.integers(0, 10_000).flatmap(lambda i: bad if i % one_in == one_in - 1 else good)


def sometimes(data: st.DataObject, label: str, one_in: int = 5) -> bool:
    return data.draw(st.integers(0, 10_000), label=label) % one_in == one_in - 1


def dumps(value: Any) -> str:
    """JSON text (NaN/Infinity as Python writes them), each :class:`Deep` spliced in as nested lists."""
    deeps: list[Deep] = []

    def enc(o: Any) -> Any:
        if isinstance(o, Deep):
            deeps.append(o)
            return f"__deep_{len(deeps) - 1}__"
        raise TypeError(type(o).__name__)

    text = json.dumps(value, default=enc)
    for i, d in enumerate(deeps):
        text = text.replace(f'"__deep_{i}__"', "[" * d.n + "]" * d.n)
    return text


def corrupt_bytes(raw: bytes, data: st.DataObject) -> bytes:
    """``raw`` with a non-UTF-8 byte sequence put in at a drawn offset (sometimes)."""
    if not sometimes(data, "corrupt"):
        return raw
    at = data.draw(st.integers(0, len(raw)), label="offset")
    bad = data.draw(st.sampled_from([b"\xff", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\x80"]), label="bad bytes")
    return raw[:at] + bad + raw[at:]


def with_duplicate(items: list, data: st.DataObject) -> list:
    """``items`` with one of them repeated (sometimes): duplicate ids."""
    if items and sometimes(data, "duplicate"):
        items = items + [items[data.draw(st.integers(0, len(items) - 1), label="which")]]
    return items


# ---- the property --------------------------------------------------------------------------------

def check(name: str, fn: Callable[[Path], Any], path: Path, line_records: bool = False) -> Any:
    """``fn(path)``: a one-line DataError naming the file, or the loaded value (returned)."""
    try:
        out = fn(path)
    except DataError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 400 + len(str(path)), msg
        assert str(path) in msg, msg
        if e.record is not None:
            assert f"record {e.record}" in msg, msg
        if line_records and e.field is not None:  # a field fault in a line-per-record file names the line
            assert "line " in str(e.record), msg
        OUTCOMES[name]["refused"] += 1
        return None
    OUTCOMES[name]["loaded"] += 1
    return out


def text_ok(val: Any) -> bool:
    return isinstance(val, str) and bool(val.strip()) and val.strip().lower() not in NON_FINITE_TEXT


def assert_loaded(samples: list, conversational: bool, categories: set | None, each_has_questions: bool) -> None:
    """The dataset invariants, restated: what a loaded value must satisfy whatever the input was."""
    assert samples, "loaded an empty dataset"
    hids = [s.history.id for s in samples]
    assert all(isinstance(h, str) and h for h in hids) and len(set(hids)) == len(hids), hids
    qids = [q.id for s in samples for q in s.questions]
    assert all(isinstance(q, str) and q for q in qids) and len(set(qids)) == len(qids), qids
    assert qids, "loaded a dataset without questions"
    for s in samples:
        h = s.history
        if conversational:
            assert h.sessions and any(isinstance(t.text, str) and t.text.strip() for x in h.sessions for t in x.turns)
        else:
            assert isinstance(h.text, str) and h.text.strip()
        assert s.questions or not each_has_questions
        for q in s.questions:
            assert text_ok(q.question) and text_ok(q.answer), (q.question, q.answer)
            assert categories is None or q.category in categories, q.category
            assert not isinstance(q.category, bool) and q.category != ""
            for o in q.options or []:
                assert isinstance(o, str) and o.strip().lower() not in NON_FINITE_TEXT


# ---- LoCoMo --------------------------------------------------------------------------------------

turn = st.fixed_dictionaries({"speaker": maybe(texts), "dia_id": maybe(st.just("D1:1")), "text": maybe(texts)},
                             optional={"blip_caption": maybe(words), "img_url": json_values})
qa = st.fixed_dictionaries({"question": maybe(texts), "category": maybe(st.integers(1, 5), st.integers(-1, 7)),
                            "answer": maybe(st.one_of(texts, st.integers(0, 3000)))},
                           optional={"adversarial_answer": maybe(words),
                                     "evidence": maybe(st.lists(st.sampled_from(["D1:1", "D1:2", "D:1:1", "D"]),
                                                                max_size=3))})
conversation = st.fixed_dictionaries({
    "sample_id": maybe(st.text(alphabet="conv-0123", min_size=1, max_size=6), one_in=4),
    "conversation": maybe(st.fixed_dictionaries(
        {"speaker_a": words, "speaker_b": words, "session_1": maybe(st.lists(turn, min_size=1, max_size=3)),
         "session_1_date_time": maybe(words)}, optional={"session_2": maybe(st.lists(turn, max_size=2))})),
    "qa": maybe(st.lists(qa, min_size=1, max_size=3))})


@SETTINGS
@given(maybe(st.lists(conversation, min_size=1, max_size=3), st.one_of(json_values, deep), one_in=6), st.data())
def test_locomo_records(tmp_path_factory, convs, data):
    if isinstance(convs, list) and all(isinstance(c, dict) for c in convs):
        convs = with_duplicate(convs, data)
    p = tmp_path_factory.mktemp("locomo") / "locomo.json"
    p.write_bytes(corrupt_bytes(dumps(convs).encode(), data))
    out = check("locomo_records", load_locomo_file, p)
    if out is not None:
        assert_loaded(out, conversational=True, categories=set(LOCOMO_CATEGORIES), each_has_questions=True)
        assert all(q.answer == "Not mentioned in the conversation" for s in out for q in s.questions
                   if q.category == 5)


@SETTINGS
@given(st.binary(max_size=200))
def test_locomo_bytes(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("locomo") / "garbage.json"
    p.write_bytes(raw)
    out = check("locomo_bytes", load_locomo_file, p)
    if out is not None:
        assert_loaded(out, conversational=True, categories=set(LOCOMO_CATEGORIES), each_has_questions=True)


# ---- PwC -----------------------------------------------------------------------------------------

def _pwc_load(path: Path):
    from omegaconf import OmegaConf

    return load_pwc_rows(option_config("dataset", {"name": "pwc", "path": str(path)}))


pwc_row = st.fixed_dictionaries({"input": maybe(texts), "prompt": maybe(texts), "answer": maybe(texts)})


@SETTINGS
@given(st.lists(maybe(pwc_row, st.one_of(json_values, deep, st.text(max_size=30)), one_in=8), min_size=1, max_size=4),
       st.data())
def test_pwc_rows(tmp_path_factory, rows, data):
    p = tmp_path_factory.mktemp("pwc") / "rows.jsonl"
    text = "\n".join(r if isinstance(r, str) else dumps(r) for r in rows) + "\n"
    p.write_bytes(corrupt_bytes(text.encode(), data))
    out = check("pwc_rows", _pwc_load, p, line_records=True)
    if out is not None:
        assert_loaded(out, conversational=False, categories={"pwc"}, each_has_questions=True)


# ---- DialSim: records and raw pickles ------------------------------------------------------------

pickle_bad = st.one_of(nasty, json_values)
dialsim_q = st.fixed_dictionaries({"questions": maybe(st.fixed_dictionaries({"default": maybe(texts, pickle_bad)},
                                                                            optional={"Nora": texts}), pickle_bad),
                                   "answer": maybe(st.sampled_from(["a", "b", "c"]), st.one_of(pickle_bad, texts)),
                                   "options": maybe(st.permutations(list("abcde")), pickle_bad)})
session = st.fixed_dictionaries(
    {"script": maybe(st.lists(st.sampled_from(["Nora: hi", "[Scene: x]", "more", "Teleplay: y", ""]), max_size=4)
                     .map(lambda lines: "\n".join(["Theo: hello", *lines])), pickle_bad),
     "date": maybe(words, pickle_bad),
     "hard_q": maybe(st.dictionaries(st.sampled_from(["cur", "past"]), st.lists(dialsim_q, min_size=1, max_size=2),
                                     min_size=1, max_size=2),
                     pickle_bad),
     "easy_q": maybe(st.dictionaries(st.sampled_from(["ans_w_time"]),
                                     st.dictionaries(st.sampled_from(["0", "1"]), dialsim_q, max_size=2), max_size=1),
                     pickle_bad)})
# session keys 1 and "1" collide once formatted into ids: duplicate ids
dialsim = st.dictionaries(st.sampled_from(["S01E01", "S01E02", 1]),
                          maybe(st.dictionaries(maybe(st.sampled_from([1, 2]), st.just("1")), session, min_size=1,
                                                max_size=3), pickle_bad),
                          min_size=1, max_size=3)


def nested_list(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def shared_blowup(width: int, levels: int) -> list:
    x: list = ["abcdefgh" * 16] * width
    for _ in range(levels):
        x = [x] * width
    return x


@SETTINGS
@given(maybe(dialsim, json_values, one_in=6), st.sampled_from(["multi_choice", "open_ended"]),
       maybe(st.none(), st.sampled_from(["deep", "blowup", "loop"]), one_in=4), st.data())
def test_dialsim_records(tmp_path_factory, data, fmt, extra, draw):
    if extra and isinstance(data, dict) and data:
        key = next(iter(data))
        if extra == "deep":
            data[key] = nested_list(draw.draw(st.integers(30, 400), label="depth"))
        elif extra == "blowup":
            data[key] = shared_blowup(draw.draw(st.integers(20, 60), label="width"), 3)
        else:
            loop: dict = {}
            loop[1] = loop
            data[key] = loop
    p = tmp_path_factory.mktemp("dialsim") / "show_dialsim.pickle"
    p.write_bytes(pickle.dumps(data, protocol=draw.draw(st.sampled_from([0, 2, 4, 5]), label="protocol")))
    per_episode = draw.draw(st.booleans(), label="per_episode")
    out = check("dialsim_records", lambda path: load_dialsim_file(path, fmt=fmt, per_episode=per_episode), p)
    if out is not None:
        assert_loaded(out, conversational=True, categories=None, each_has_questions=False)
        for s in out:
            for q in s.questions:
                assert fmt == "open_ended" or q.answer in q.options


CTORS = ["bytearray", "bytes", "str", "list", "set", "frozenset", "tuple", "dict", "int", "complex"]


@SETTINGS
@given(st.sampled_from(CTORS), st.integers(0, 2 ** 62), st.sampled_from(["top", "script", "answer"]))
def test_dialsim_pickle_huge_sizes(tmp_path_factory, ctor, size, where):
    """A constructor given a (huge) size argument, alone or where a string belongs in the real layout."""
    call = f"cbuiltins\n{ctor}\n(I{size}\ntR".encode()
    if where == "top":
        raw = call + b"."
    else:
        q = {"questions": {"default": "q?"}, "answer": "__X__" if where == "answer" else "a", "options": list("abcde")}
        sess = {"script": "__X__" if where == "script" else "Nora: hi", "date": "d", "hard_q": {"cur": [q]}}
        raw = pickle.dumps({"S01E01": {1: sess}}, protocol=0).replace(b"V__X__\n", call)
    p = tmp_path_factory.mktemp("dialsim") / "big_dialsim.pickle"
    p.write_bytes(raw)
    out = check("dialsim_pickle_huge_sizes", load_dialsim_file, p)
    if out is not None:
        assert_loaded(out, conversational=True, categories=None, each_has_questions=False)


@SETTINGS
@given(st.integers(65, 100_000), st.sampled_from([b"]", b"(", b"}"]))
def test_dialsim_pickle_deep_opcodes(tmp_path_factory, depth, opener):
    """Nesting built by opcodes (never by pickle.dumps, which would itself recurse)."""
    if opener == b"(":  # MARK ... LIST: tuples/lists via marks
        raw = b"\x80\x02" + b"(" * depth + b"l" * depth + b"."
    elif opener == b"}":
        raw = b"\x80\x02" + b"}K\x01" * depth + b"}" + b"s" * depth + b"."
    else:
        raw = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    p = tmp_path_factory.mktemp("dialsim") / "deep_dialsim.pickle"
    p.write_bytes(raw)
    assert check("dialsim_pickle_deep_opcodes", load_dialsim_file, p) is None


@SETTINGS
@given(st.binary(max_size=120))
def test_dialsim_garbage_bytes(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("dialsim") / "bad_dialsim.pickle"
    p.write_bytes(raw)
    out = check("dialsim_garbage_bytes", load_dialsim_file, p)
    if out is not None:
        assert_loaded(out, conversational=True, categories=None, each_has_questions=False)


# ---- score: prediction files ---------------------------------------------------------------------

pred_line = maybe(
    st.fixed_dictionaries({"id": maybe(st.one_of(texts, st.integers(0, 10 ** 6))), "prediction": maybe(words),
                           "answer": maybe(st.one_of(texts, st.integers(0, 3000))),
                           "category": maybe(st.sampled_from([1, 2, 5, "pwc", "adversarial"]))},
                          optional={"adversarial_answer": maybe(texts), "category_name": maybe(texts)}),
    st.one_of(json_values, deep, st.text(max_size=30), st.just("")), one_in=6)


def assert_predictions(records: list[dict]) -> None:
    ids = [str(r["id"]) for r in records]
    assert records and len(set(ids)) == len(ids), ids
    for r in records:
        assert not isinstance(r["id"], bool) and isinstance(r["id"], (str, int)) and str(r["id"]).strip()
        assert isinstance(r["prediction"], str)
        if "answer" in r:
            assert text_ok(r["answer"]), r["answer"]
        else:
            assert "adversarial_answer" in r
        assert not isinstance(r["category"], bool) and isinstance(r["category"], (str, int)) and r["category"] != ""
        for v in r.values():
            assert not (isinstance(v, float) and not math.isfinite(v))


@SETTINGS
@given(st.lists(pred_line, min_size=0, max_size=4), st.data())
def test_prediction_files(tmp_path_factory, lines, data):
    lines = with_duplicate(lines, data)
    p = tmp_path_factory.mktemp("pred") / "predictions.jsonl"
    text = "\n".join(x if isinstance(x, str) else dumps(x) for x in lines)
    p.write_bytes(corrupt_bytes(text.encode(), data))
    out = check("prediction_files", load_prediction_file, p, line_records=True)
    if out is not None:
        assert_predictions(out)
