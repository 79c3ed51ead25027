"""The cases of the bad-input sweep (``tests/test_bad_input_sweep.py``, run by ``tests/bad_input/harness.py``):
malformed inputs and corrupted run files, one ``Case`` each.

A case is a ``python -m ctxbench ...`` command line (``argv``, a template) and a ``make`` function that
writes the bad input into the case's own folder before the command runs. Templates name:

- ``{work}``: the case's folder (a fresh temp folder; the command's run folders go below it);
- ``{url}``: the fake OpenAI-compatible server's ``/v1`` base URL for the case's ``server`` mode
  (``{host}``: its ``127.0.0.1:PORT``);
- ``{fixtures}``: the shared fixtures folder (the valid base LoCoMo file, the real runs);
- ``{shared}`` / ``{repo}``: the shared data folder and the checkout under test.

``make(work, ctx)`` gets the same values in ``ctx`` (``ctx["fixtures"]`` etc. as ``Path``). Nothing here
imports ctxbench or the tests: the inputs are built from the shared data, the repo's shipped DialSim
sample and hand-written pickle opcodes. An input built from the shared data raises ``SharedDataMissing``
where that data is absent (the harness skips the case, naming the file).
"""
from __future__ import annotations

import copy
import json
import math
import pickle
import re
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HUGE = 64 << 20        # a 64 MiB string: over any sane per-record bound, cheap to write
DEEP = 100_000         # nesting depth: far past Python's recursion limit
GROUPS = ("locomo", "pwc", "dialsim", "score", "config_eval", "config_train", "server", "runfiles", "faults")
INPUT_GROUPS = GROUPS[:GROUPS.index("runfiles")]  # malformed inputs; runfiles and faults are damaged run folders or faults
MARKER = "PWNED"       # a malicious payload tries to create {work}/PWNED

Make = Callable[[Path, dict], None]


class SharedDataMissing(Exception):
    """A case's input is built from the shared data (``../shared/data``), and that file is absent."""


def shared_file(ctx: dict, name: str) -> Path:
    """``{shared}/data/name``, or ``SharedDataMissing`` naming it."""
    p = Path(ctx["shared"]) / "data" / name
    if not p.is_file():
        raise SharedDataMissing(f"needs the shared data file {p}, which is absent")
    return p


@dataclass
class Case:
    """One malformed input (or corrupted run file) and the command that reads it."""

    id: str
    group: str
    description: str
    argv: list[str]
    make: Make | None = None
    ok_if_success: bool = False       # a documented recovery is right: exit 0 needs ``recovery`` to hold
    recovery: str | Callable[[str, Path], bool] | None = None  # regex over stdout+stderr, or a check
    expect: tuple[str, ...] = ()      # a clear error must name one of these (case-insensitive)
    malicious: bool = False           # a payload that would create {work}/PWNED if it ran
    server: str = "ok"                # the fake server's behaviour for this case
    needs: tuple[str, ...] = ()       # fixtures: "train_one", "train_two", "eval_run"
    mem_bound_mb: int | None = None   # peak RSS above this = the input was taken in without a bound
    timeout: int | None = None
    exclusive: bool = False           # run alone (allocates GiBs)
    control: bool = False             # a valid input: must succeed (checks the harness)
    must_recover: bool = False        # only the recovery is right: a clear error is "not_recovered"
    env: dict[str, str] = field(default_factory=dict)


# ---- command lines --------------------------------------------------------------------------------

FAST_RETRY = ["llm.backoff_s=0.01", "llm.backoff_max_s=1"]
EVAL = ["eval", "memory=no_context", "llm=openai", "llm.base_url={url}", "llm.model=fake", "llm.api_key_env=null",
        "limit=2", "progress=false", "hydra.run.dir={work}/run"]
TRAIN = ["train", "method=lm", "model=tiny", "trainer.progress=false", "method.seq_len=32", "trainer.max_steps=2",
         "trainer.eval_every=0", "hydra.run.dir={work}/run"]
# the real runs that run-file cases corrupt (made once per sweep, copied into each case folder)
TRAIN_RUN = ["train", "method=lm", "model=tiny", "trainer.progress=false", "method.seq_len=32", "trainer.max_steps=6",
             "trainer.save_every=2"]
TRAIN_RESUME = TRAIN_RUN + ["trainer.resume=auto", "hydra.run.dir={work}/run"]
EVAL_RUN = ["eval", "memory=no_context", "dataset=locomo", "dataset.path={fixtures}/base_locomo.json", "llm=openai",
            "llm.base_url={url}", "llm.model=fake", "llm.api_key_env=null", "progress=false",
            "llm.cache_path={work}/run_cache.sqlite"]
EVAL_RERUN = EVAL_RUN + ["limit=4", "hydra.run.dir={work}/run"]


def eval_on(dataset: str, file: str = "{work}/in") -> list[str]:
    return EVAL + [f"dataset={dataset}", f"dataset.path={file}"]


def score_on(file: str = "{work}/pred.jsonl") -> list[str]:
    return ["score", f"predictions={file}", "progress=false", "hydra.run.dir={work}/run"]


# ---- small helpers for make() ---------------------------------------------------------------------

def write(name: str, data: bytes | str | Callable[[dict], bytes | str]) -> Make:
    """A make() writing ``{work}/name`` (``data`` may be a function of ctx, for inputs built from the base)."""
    def make(work: Path, ctx: dict) -> None:
        d = data(ctx) if callable(data) else data
        (work / name).write_bytes(d.encode() if isinstance(d, str) else d)
    return make


def answered(n: int) -> Callable[[str, Path], bool]:
    """A recovery check: the eval run folder holds ``n`` predictions."""
    def check(_out: str, work: Path) -> bool:
        p = work / "run" / "predictions.jsonl"
        return p.exists() and sum(1 for ln in p.read_text().splitlines() if ln.strip()) == n
    return check


def deep_list_text(n: int = DEEP) -> str:
    return "[" * n + "]" * n


# ---- LoCoMo ---------------------------------------------------------------------------------------

def base_locomo(ctx: dict) -> list[dict[str, Any]]:
    """conv-26 of the real locomo10.json with its first 2 sessions and 5 questions (all valid)."""
    cache = ctx.setdefault("_cache", {})
    if "locomo" not in cache:
        data = json.loads(shared_file(ctx, "locomo10.json").read_text(encoding="utf-8"))
        c = data[0]
        keep = ("speaker_a", "speaker_b", "session_1", "session_1_date_time", "session_2", "session_2_date_time")
        conv = {k: c["conversation"][k] for k in keep}
        cache["locomo"] = [{"sample_id": c["sample_id"], "conversation": conv, "qa": c["qa"][:5]}]
    return copy.deepcopy(cache["locomo"])


def locomo_text(ctx: dict) -> str:
    return json.dumps(base_locomo(ctx))


def lm(edit: Callable[[list], Any]) -> Callable[[dict], str]:
    """The base LoCoMo list after ``edit(data)`` (``edit`` may return a replacement), as JSON text."""
    def build(ctx: dict) -> str:
        d = base_locomo(ctx)
        out = edit(d)
        return json.dumps(d if out is None else out, allow_nan=True)
    return build


def conv(d: list) -> dict:
    return d[0]["conversation"]


def qa0(d: list) -> dict:
    return d[0]["qa"][0]


def turn0(d: list) -> dict:
    return d[0]["conversation"]["session_1"][0]


def setk(get: Callable[[Any], dict], key: str, value: Any) -> Callable[[Any], None]:
    """An edit setting ``get(d)[key] = value`` (a callable ``value`` is called then: huge strings stay lazy)."""
    def edit(d: Any) -> None:
        get(d)[key] = value() if callable(value) else value
    return edit


def delk(get: Callable[[Any], dict], key: str) -> Callable[[Any], None]:
    def edit(d: Any) -> None:
        get(d).pop(key, None)
    return edit


def no_sessions(d: list) -> None:
    c = conv(d)
    for k in [k for k in c if k.startswith("session_")]:
        del c[k]


def empty_sessions(d: list) -> None:
    c = conv(d)
    for k in [k for k in c if k.startswith("session_") and not k.endswith("date_time")]:
        c[k] = []


def locomo_cases() -> list[Case]:
    raw = {  # whole-file faults
        "not_json": ("not JSON at all", "this is not json\n"),
        "empty_file": ("an empty file", ""),
        "truncated": ("the valid file cut in half", lambda ctx: locomo_text(ctx)[: len(locomo_text(ctx)) // 2]),
        "top_dict": ("top level is one conversation object, not a list", lambda ctx: json.dumps(base_locomo(ctx)[0])),
        "top_str": ("top level is a string", '"conv-26"'),
        "top_number": ("top level is a number", "42"),
        "top_null": ("top level is null", "null"),
        "top_empty_list": ("an empty list of conversations", "[]"),
        "conversation_is_string": ("a conversation that is a string", '["conv-26"]'),
        "null_conversation": ("a null after a valid conversation", lm(lambda d: d + [None])),
        "nan_literal_answer": ("answer is the NaN literal", lm(setk(qa0, "answer", math.nan))),
        "infinity_answer": ("answer is Infinity", lm(setk(qa0, "answer", math.inf))),
        "neg_infinity_category": ("category is -Infinity", lm(setk(qa0, "category", -math.inf))),
        "category_1e400": ("category 1e400 (overflows to inf)",
                           lambda ctx: locomo_text(ctx).replace('"category": 2', '"category": 1e400', 1)),
        "bigint_category": ("category with 5000 digits (past int parsing limits)",
                            lambda ctx: locomo_text(ctx).replace('"category": 2', '"category": ' + "9" * 5000, 1)),
        "deep_nesting_top": (f"JSON nested {DEEP} deep", deep_list_text()),
        "deep_nesting_evidence": (f"evidence nested {DEEP} deep",
                                  lambda ctx: locomo_text(ctx).replace('"evidence": ["D1:3"]',
                                                                       '"evidence": ' + deep_list_text(), 1)),
        "non_utf8": ("invalid UTF-8 bytes inside a turn text",
                     lambda ctx: locomo_text(ctx).encode().replace(b"Hey Mel!", b"Hey \xff\xfe Mel!", 1)),
        "nul_bytes": ("NUL bytes in the file", b"\x00\x00\x00\x00"),
    }
    fields = {  # one field of a valid file broken
        "sample_id_missing": ("conversation without sample_id", lm(delk(lambda d: d[0], "sample_id"))),
        "sample_id_number": ("sample_id is a number", lm(setk(lambda d: d[0], "sample_id", 26))),
        "sample_id_null": ("sample_id is null", lm(setk(lambda d: d[0], "sample_id", None))),
        "sample_id_empty": ("sample_id is an empty string", lm(setk(lambda d: d[0], "sample_id", ""))),
        "conversation_missing": ("no conversation field", lm(delk(lambda d: d[0], "conversation"))),
        "conversation_list": ("conversation is a list", lm(setk(lambda d: d[0], "conversation", []))),
        "speaker_a_missing": ("no speaker_a", lm(delk(conv, "speaker_a"))),
        "speaker_b_number": ("speaker_b is a number", lm(setk(conv, "speaker_b", 7))),
        "speaker_a_empty": ("speaker_a is an empty string", lm(setk(conv, "speaker_a", ""))),
        "session_not_list": ("session_1 is a string", lm(setk(conv, "session_1", "hello"))),
        "turn_not_dict": ("a turn that is a string", lm(lambda d: conv(d)["session_1"].__setitem__(0, "hi"))),
        "turn_missing_text": ("a turn without text", lm(delk(turn0, "text"))),
        "turn_missing_speaker": ("a turn without speaker", lm(delk(turn0, "speaker"))),
        "turn_numeric_text": ("a turn whose text is a number", lm(setk(turn0, "text", 12345))),
        "turn_dia_id_number": ("a turn whose dia_id is a number", lm(setk(turn0, "dia_id", 3))),
        "turn_speaker_unknown": ("a turn by a speaker who is neither speaker_a nor speaker_b",
                                 lm(setk(turn0, "speaker", "Mallory"))),
        "turn_caption_number": ("blip_caption is a number", lm(setk(turn0, "blip_caption", 5))),
        "huge_turn_text": (f"a turn text of {HUGE >> 20} MiB", lm(setk(turn0, "text", lambda: "x" * HUGE))),
        "no_sessions": ("a conversation with no sessions", lm(no_sessions)),
        "all_sessions_empty": ("every session an empty list", lm(empty_sessions)),
        "session_date_number": ("session_1_date_time is a number", lm(setk(conv, "session_1_date_time", 20230507))),
        "qa_missing": ("no qa field", lm(delk(lambda d: d[0], "qa"))),
        "qa_not_list": ("qa is an object", lm(setk(lambda d: d[0], "qa", {"q": 1}))),
        "qa_empty": ("qa is an empty list", lm(setk(lambda d: d[0], "qa", []))),
        "qa_item_string": ("a qa item that is a string", lm(lambda d: d[0]["qa"].__setitem__(0, "why?"))),
        "question_empty": ("question is an empty string", lm(setk(qa0, "question", ""))),
        "question_blank": ("question is only whitespace", lm(setk(qa0, "question", "   "))),
        "question_null": ("question is null", lm(setk(qa0, "question", None))),
        "question_number": ("question is a number", lm(setk(qa0, "question", 3))),
        "question_missing": ("no question field", lm(delk(qa0, "question"))),
        "answer_empty": ("answer is an empty string", lm(setk(qa0, "answer", ""))),
        "answer_null": ("answer is null (category 2)", lm(setk(qa0, "answer", None))),
        "answer_missing": ("no answer (category 2)", lm(delk(qa0, "answer"))),
        "answer_list": ("answer is a list", lm(setk(qa0, "answer", ["7 May 2023"]))),
        "answer_dict": ("answer is an object", lm(setk(qa0, "answer", {"a": 1}))),
        "answer_bool": ("answer is true", lm(setk(qa0, "answer", True))),
        "category_0": ("category 0", lm(setk(qa0, "category", 0))),
        "category_9": ("category 9", lm(setk(qa0, "category", 9))),
        "category_str": ('category "x"', lm(setk(qa0, "category", "x"))),
        "category_null": ("category null", lm(setk(qa0, "category", None))),
        "category_missing": ("no category", lm(delk(qa0, "category"))),
        "category_bool": ("category true", lm(setk(qa0, "category", True))),
        "evidence_string": ("evidence is a string, not a list", lm(setk(qa0, "evidence", "D1:3"))),
        "evidence_numbers": ("evidence is a list of numbers", lm(setk(qa0, "evidence", [1, 3]))),
        "adversarial_answer_dict": ("a category-5 item whose adversarial_answer is an object",
                                    lm(lambda d: qa0(d).update(category=5, adversarial_answer={"x": 1}))),
        "duplicate_sample_ids": ("the same conversation twice", lm(lambda d: d + copy.deepcopy(d))),
    }
    cases = [Case(f"locomo.{k}", "locomo", desc, eval_on("locomo"), write("in", data), expect=("{work}/in",))
             for k, (desc, data) in {**raw, **fields}.items()]
    cases += [
        Case("locomo.bom", "locomo", "a UTF-8 byte-order mark before the JSON", eval_on("locomo"),
             write("in", lambda ctx: b"\xef\xbb\xbf" + locomo_text(ctx).encode()), expect=("{work}/in",),
             ok_if_success=True, recovery=answered(2)),
        Case("locomo.turn_missing_dia_id", "locomo", "a turn without dia_id (a quirk the loader counts)",
             eval_on("locomo"), write("in", lm(delk(turn0, "dia_id"))), expect=("{work}/in",), ok_if_success=True,
             recovery=r"turns_without_dia_id=1"),
        Case("locomo.duplicate_questions", "locomo", "the same question twice in one conversation",
             eval_on("locomo"), write("in", lm(lambda d: d[0]["qa"].insert(1, copy.deepcopy(qa0(d))))),
             expect=("{work}/in",), ok_if_success=True, recovery=r"(?i)duplicate"),
        Case("locomo.control", "locomo", "the valid base file (control)", eval_on("locomo"),
             write("in", locomo_text), control=True),
    ]
    return cases


# ---- PwC ------------------------------------------------------------------------------------------

def base_pwc_rows(ctx: dict, n: int = 3) -> list[dict[str, Any]]:
    """The first rows of the real PwC dev file (``input``, ``prompt``, ``answer``)."""
    cache = ctx.setdefault("_cache", {})
    if "pwc" not in cache:
        lines = shared_file(ctx, "pwc_dev_icae_v2.jsonl").read_text(encoding="utf-8").splitlines()
        cache["pwc"] = [json.loads(ln) for ln in lines if ln.strip()][:n]
    return copy.deepcopy(cache["pwc"])


def jsonl(rows: list[Any]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r, allow_nan=True)) + "\n" for r in rows)


def pw(edit: Callable[[list], Any]) -> Callable[[dict], str]:
    """The base PwC rows after ``edit(rows)`` (may return replacement rows or the whole text)."""
    def build(ctx: dict) -> str:
        rows = base_pwc_rows(ctx)
        out = edit(rows)
        return out if isinstance(out, str) else jsonl(rows if out is None else out)
    return build


def row1(rows: list) -> dict:
    return rows[1]


def pwc_cases() -> list[Case]:
    specs = {
        "torn_middle_line": ("a torn line in the middle",
                             pw(lambda r: jsonl(r[:1]) + json.dumps(r[1])[:50] + "\n" + jsonl(r[2:]))),
        "not_json_line": ("a line that is not JSON", pw(lambda r: [r[0], "hello world", r[2]])),
        "line_list": ("a line that is a JSON list", pw(lambda r: [r[0], "[1, 2]", r[2]])),
        "line_string": ("a line that is a JSON string", pw(lambda r: [r[0], '"text"', r[2]])),
        "line_number": ("a line that is a number", pw(lambda r: [r[0], "42", r[2]])),
        "line_null": ("a line that is null", pw(lambda r: [r[0], "null", r[2]])),
        "missing_input": ("a row without input", pw(delk(row1, "input"))),
        "missing_prompt": ("a row without prompt", pw(delk(row1, "prompt"))),
        "missing_answer": ("a row without answer", pw(delk(row1, "answer"))),
        "input_number": ("input is a number", pw(setk(row1, "input", 5))),
        "prompt_null": ("prompt is null", pw(setk(row1, "prompt", None))),
        "answer_list": ("answer is a list", pw(setk(row1, "answer", ["a"]))),
        "answer_dict": ("answer is an object", pw(setk(row1, "answer", {"a": 1}))),
        "input_empty": ("input is an empty string", pw(setk(row1, "input", ""))),
        "prompt_empty": ("prompt is an empty string", pw(setk(row1, "prompt", ""))),
        "answer_empty": ("answer is an empty string", pw(setk(row1, "answer", ""))),
        "answer_nan": ("answer is NaN", pw(setk(row1, "answer", math.nan))),
        "answer_infinity": ("answer is Infinity", pw(setk(row1, "answer", math.inf))),
        "blank_file": ("only blank lines", "\n\n   \n"),
        "empty_file": ("an empty file", ""),
        "non_utf8": ("invalid UTF-8 bytes in a row", lambda ctx: pw(lambda r: None)(ctx).encode().replace(
            b'"prompt": "', b'"prompt": "\xff\xfe', 1)),
        "deep_nesting": (f"a row nested {DEEP} deep", pw(lambda r: [r[0], deep_list_text(), r[2]])),
        "deep_nesting_field": (f"answer nested {DEEP} deep",
                               pw(lambda r: jsonl(r[:1]) + '{"input": "x", "prompt": "y", "answer": '
                                  + deep_list_text() + "}\n")),
        "huge_line": (f"an input of {HUGE >> 20} MiB", pw(setk(row1, "input", lambda: "x" * HUGE))),
        "bigint": ("a number with 5000 digits", pw(lambda r: [r[0], '{"input": "x", "prompt": "y", "answer": '
                                                             + "9" * 5000 + "}"])),
        "nul_bytes": ("a line of NUL bytes", pw(lambda r: [r[0], "\x00\x00\x00", r[2]])),
        "top_level_array": ("the rows as one JSON array, not JSONL", pw(lambda r: json.dumps(r))),
    }
    cases = [Case(f"pwc.{k}", "pwc", desc, eval_on("pwc"), write("in", data), expect=("{work}/in",))
             for k, (desc, data) in specs.items()]
    cases += [
        Case("pwc.torn_last_line", "pwc", "a torn last line (an interrupted write)", eval_on("pwc"),
             write("in", pw(lambda r: jsonl(r[:2]) + json.dumps(r[2])[:40])), expect=("{work}/in",),
             ok_if_success=True, recovery=r"(?i)torn|truncat|incomplete"),
        Case("pwc.bom", "pwc", "a UTF-8 byte-order mark before the first row", eval_on("pwc"),
             write("in", lambda ctx: b"\xef\xbb\xbf" + pw(lambda r: None)(ctx).encode()), expect=("{work}/in",),
             ok_if_success=True, recovery=answered(2)),
        Case("pwc.control", "pwc", "the valid base rows (control)", eval_on("pwc"), write("in", pw(lambda r: None)),
             control=True),
    ]
    return cases


# ---- DialSim --------------------------------------------------------------------------------------

def base_dialsim(ctx: dict) -> dict:
    """The repo's shipped DialSim sample (only builtin containers and strings; trusted, our own file)."""
    cache = ctx.setdefault("_cache", {})
    if "dialsim" not in cache:
        cache["dialsim"] = pickle.loads((Path(ctx["repo"]) / "data" / "samples" / "dialsim_sample.pickle").read_bytes())
    return copy.deepcopy(cache["dialsim"])


def ds(edit: Callable[[dict], Any]) -> Callable[[dict], bytes]:
    def build(ctx: dict) -> bytes:
        d = base_dialsim(ctx)
        out = edit(d)
        return pickle.dumps(d if out is None else out, protocol=4)
    return build


def sess(d: dict) -> dict:
    return d["S01E01"][1]


def dq(d: dict) -> dict:
    return d["S01E01"][1]["hard_q"]["cur"][0]


def _u(s: str) -> bytes:
    """BINUNICODE: a str on the unpickler's stack."""
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _short_u(s: str) -> bytes:
    """SHORT_BINUNICODE (protocol 4)."""
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def call_pickle(module: str, name: str, *args: str) -> bytes:
    """``module.name(*args)`` as a protocol-2 pickle: GLOBAL, MARK, args, TUPLE, REDUCE, STOP."""
    return b"\x80\x02" + _global(module, name) + b"(" + b"".join(_u(a) for a in args) + b"tR."


def marker_cmd(ctx: dict) -> str:
    return f"touch {ctx['work']}/{MARKER}"


def getattr_chain(ctx: dict) -> bytes:
    """``getattr(__import__('os'), 'system')('touch ...')``."""
    inner = _global("builtins", "getattr") + b"(" + _global("builtins", "__import__") + b"(" + _u("os") + b"tR" \
        + _u("system") + b"tR"
    return b"\x80\x02" + inner + b"(" + _u(marker_cmd(ctx)) + b"tR."


def popen_pickle(ctx: dict) -> bytes:
    """``subprocess.Popen(['touch', marker])``."""
    return (b"\x80\x02" + _global("subprocess", "Popen") + b"((" + _u("touch") + _u(f"{ctx['work']}/{MARKER}")
            + b"ltR.")


def bytearray_of(n: int) -> bytes:
    """``bytearray(n)`` by hand: GLOBAL builtins.bytearray, LONG1 n, TUPLE1, REDUCE, STOP (no PROTO)."""
    nb = (n.bit_length() + 8) // 8
    return _global("builtins", "bytearray") + b"\x8a" + bytes([nb]) + n.to_bytes(nb, "little") + b"\x85R."


def deep_pickle_list(n: int = DEEP) -> bytes:
    """``[[[...]]]`` ``n`` deep: MARK × n, EMPTY_LIST, LIST × n (the unpickler needs no recursion)."""
    return b"(" * n + b"]" + b"l" * n


def deep_in_script(ctx: dict) -> bytes:
    """A valid layout whose session script is a list nested 100k deep."""
    return (b"\x80\x02}" + _u("S01E01") + b"}" + b"K\x01" + b"}" + _u("date") + _u("today") + b"s" + _u("script")
            + deep_pickle_list() + b"sss.")


def deep_in_questions(ctx: dict) -> bytes:
    """A valid layout whose question phrasings are a dict nested 100k deep."""
    nested = (b"}" + _u("k")) * DEEP + b"}" + b"s" * DEEP
    q = b"}" + _u("questions") + nested + b"s"
    hard = b"}" + _u("cur") + b"]" + q + b"a" + b"s"
    sess_ = b"}" + _u("script") + _u("Nora: hi") + b"s" + _u("hard_q") + hard + b"s"
    return b"\x80\x02}" + _u("S01E01") + b"}" + b"K\x01" + sess_ + b"ss."


def dialsim_cases() -> list[Case]:
    bad = lambda b: lambda ctx: b  # noqa: E731 - constant bytes
    malicious = {
        "os_system": ("os.system('touch PWNED') (GLOBAL os.system)",
                      lambda ctx: call_pickle("os", "system", marker_cmd(ctx))),
        "posix_system": ("posix.system('touch PWNED')", lambda ctx: call_pickle("posix", "system", marker_cmd(ctx))),
        "subprocess_popen": ("subprocess.Popen(['touch', PWNED])", popen_pickle),
        "builtins_eval": ("builtins.eval of __import__('os').system(...)", lambda ctx: call_pickle(
            "builtins", "eval", f"__import__('os').system({marker_cmd(ctx)!r})")),
        "builtins_exec": ("builtins.exec of an import and a system call", lambda ctx: call_pickle(
            "builtins", "exec", f"import os; os.system({marker_cmd(ctx)!r})")),
        "builtins_getattr": ("getattr(__import__('os'), 'system')(...)", getattr_chain),
        "py2_builtin_eval": ("__builtin__.eval (the Python 2 module name)", lambda ctx: call_pickle(
            "__builtin__", "eval", f"__import__('os').system({marker_cmd(ctx)!r})")),
        "dotted_global": ("STACK_GLOBAL builtins 'dict.__class__.__subclasses__' (a dotted name)",
                          bad(b"\x80\x04" + _short_u("builtins") + _short_u("dict.__class__.__subclasses__")
                              + b"\x93)R.")),
        "codecs_encode_rot13": ("the admitted _codecs.encode called with rot13", lambda ctx: call_pickle(
            "_codecs", "encode", "abc", "rot13")),
        "copyreg_reconstructor": ("copyreg._reconstructor (a common class-rebuild global)",
                                  lambda ctx: call_pickle("copyreg", "_reconstructor", "x")),
        "persistent_id": ("a persistent id (PERSID)", bad(b"\x80\x02P" + b"ctxbench\n" + b".")),
    }
    specs = {
        "bytearray_2_50": (f"bytearray(2**50) in a {len(bytearray_of(2 ** 50))}-byte pickle",
                           bad(bytearray_of(2 ** 50))),
        "deep_list": (f"lists nested {DEEP} deep", bad(b"\x80\x02" + deep_pickle_list() + b".")),
        "deep_in_script": (f"a script nested {DEEP} deep in a valid layout", deep_in_script),
        "deep_in_questions": (f"question phrasings nested {DEEP} deep in a valid layout", deep_in_questions),
        "truncated": ("the sample pickle cut in half", lambda ctx: ds(lambda d: None)(ctx)[:200]),
        "empty_file": ("an empty file", bad(b"")),
        "garbage": ("random-looking bytes", bad(bytes((i * 73 + 11) % 256 for i in range(512)))),
        "json_file": ("the sample as JSON, not a pickle", lambda ctx: json.dumps(
            {str(k): {str(s): v for s, v in e.items()} for k, e in base_dialsim(ctx).items()})),
        "out_of_band_buffer": ("a protocol-5 out-of-band buffer (NEXT_BUFFER)", bad(b"\x80\x05\x97.")),
        "memo_missing": ("BINGET of a memo slot never set", bad(b"\x80\x02h\x05.")),
        "int_5000_digits": ("INT with 5000 digits", bad(b"I" + b"9" * 5000 + b"\n.")),
        "long4_claims_2gb": ("LONG4 claiming 2 GiB of digits", bad(b"\x80\x02\x8b" + struct.pack("<i", 2 ** 31 - 1)
                                                                     + b"\x01.")),
        "unicode8_claims_2_60": ("BINUNICODE8 claiming 2**60 bytes", bad(b"\x80\x04\x8d" + struct.pack("<Q", 2 ** 60)
                                                                         + b"x.")),
        "frame_claims_2_62": ("FRAME claiming 2**62 bytes", bad(b"\x80\x04\x95" + struct.pack("<Q", 2 ** 62) + b"}.")),
        "unhashable_key": ("a dict with a list as key", bad(b"\x80\x02}]K\x01s.")),
        "str_pickle": ("a pickled string", bad(pickle.dumps("friends"))),
        "list_not_dict": ("a list instead of the episodes dict", ds(lambda d: list(d.values()))),
        "no_episodes": ("an empty dict of episodes", ds(lambda d: {})),
        "episode_list": ("an episode that is a list", ds(lambda d: d.__setitem__("S01E01", [1, 2]))),
        "session_not_dict": ("a session that is a string", ds(lambda d: d["S01E01"].__setitem__(1, "script"))),
        "script_missing": ("a session without script", ds(delk(sess, "script"))),
        "script_number": ("script is a number", ds(lambda d: sess(d).__setitem__("script", 5))),
        "script_empty": ("script is an empty string", ds(lambda d: sess(d).__setitem__("script", ""))),
        "date_number": ("date is a number", ds(lambda d: sess(d).__setitem__("date", 2021))),
        "hard_q_list": ("hard_q is a list", ds(lambda d: sess(d).__setitem__("hard_q", [1]))),
        "bucket_int": ("a question bucket that is an int", ds(lambda d: sess(d)["hard_q"].__setitem__("cur", 3))),
        "question_not_dict": ("a question that is a string",
                              ds(lambda d: sess(d)["hard_q"]["cur"].__setitem__(0, "q"))),
        "answer_missing": ("a question without answer", ds(delk(dq, "answer"))),
        "answer_none": ("answer is None", ds(lambda d: dq(d).__setitem__("answer", None))),
        "answer_list": ("answer is a list", ds(lambda d: dq(d).__setitem__("answer", ["The new oven"]))),
        "answer_empty": ("answer is an empty string", ds(lambda d: dq(d).__setitem__("answer", ""))),
        "answer_nan": ("answer is float NaN", ds(lambda d: dq(d).__setitem__("answer", math.nan))),
        "questions_missing": ("a question without phrasings", ds(delk(dq, "questions"))),
        "questions_empty": ("phrasings is an empty dict", ds(lambda d: dq(d).__setitem__("questions", {}))),
        "phrasing_not_str": ("a phrasing that is a number", ds(lambda d: dq(d)["questions"].__setitem__("default", 5))),
        "phrasing_empty": ("the default phrasing is an empty string",
                           ds(lambda d: dq(d).__setitem__("questions", {"default": ""}))),
        "options_str": ("options is a string", ds(lambda d: dq(d).__setitem__("options", "ABCDE"))),
        "options_item_dict": ("an option that is an object", ds(lambda d: dq(d)["options"].__setitem__(1, {"x": 1}))),
    }
    cases = [Case(f"dialsim.{k}", "dialsim", desc, eval_on("dialsim", "{work}/in.pickle"),
                  write("in.pickle", data), expect=("{work}/in.pickle",), malicious=True)
             for k, (desc, data) in malicious.items()]
    cases += [Case(f"dialsim.{k}", "dialsim", desc, eval_on("dialsim", "{work}/in.pickle"),
                   write("in.pickle", data), expect=("{work}/in.pickle",), mem_bound_mb=4096)
              for k, (desc, data) in specs.items()]
    cases += [
        Case("dialsim.bytearray_2_33", "dialsim",
             f"bytearray(2**33) (8 GiB) in a {len(bytearray_of(2 ** 33))}-byte pickle",
             eval_on("dialsim", "{work}/in.pickle"), write("in.pickle", bytearray_of(2 ** 33)),
             expect=("{work}/in.pickle",),
             mem_bound_mb=2048, exclusive=True),
        Case("dialsim.control", "dialsim", "the valid base pickle (control)", eval_on("dialsim", "{work}/in.pickle"),
             write("in.pickle", ds(lambda d: None)), control=True),
    ]
    return cases


# ---- score prediction files -----------------------------------------------------------------------

BASE_PRED = [{"id": "conv-26-q0", "prediction": "7 May 2023", "answer": "7 May 2023", "category": 2},
             {"id": "conv-26-q1", "prediction": "2022", "answer": "2022", "category": 2},
             {"id": "conv-26-q2", "prediction": "psychology", "answer": "Psychology, counseling", "category": 3}]


def pr(edit: Callable[[list], Any]) -> str:
    rows = copy.deepcopy(BASE_PRED)
    out = edit(rows)
    return out if isinstance(out, str) else jsonl(rows if out is None else out)


def p1(rows: list) -> dict:
    return rows[1]


def score_cases() -> list[Case]:
    specs = {
        "duplicate_ids": ("the same id twice", pr(lambda r: r + [copy.deepcopy(r[0])])),
        "duplicate_ids_int_str": ('ids 1 and "1"', pr(lambda r: [dict(r[0], id=1), dict(r[1], id="1")])),
        "answer_null": ("answer null", pr(setk(p1, "answer", None))),
        "answer_empty_list": ("answer []", pr(setk(p1, "answer", []))),
        "answer_dict": ("answer {}", pr(setk(p1, "answer", {}))),
        "answer_nan": ("answer NaN", pr(setk(p1, "answer", math.nan))),
        "answer_infinity": ("answer Infinity", pr(setk(p1, "answer", math.inf))),
        "answer_bool": ("answer true", pr(setk(p1, "answer", True))),
        "answer_empty": ('answer ""', pr(setk(p1, "answer", ""))),
        "answer_missing": ("no answer (category 2)", pr(delk(p1, "answer"))),
        "id_missing": ("no id", pr(delk(p1, "id"))),
        "id_null": ("id null", pr(setk(p1, "id", None))),
        "id_empty": ('id ""', pr(setk(p1, "id", ""))),
        "prediction_missing": ("no prediction", pr(delk(p1, "prediction"))),
        "prediction_null": ("prediction null", pr(setk(p1, "prediction", None))),
        "prediction_nan": ("prediction NaN", pr(setk(p1, "prediction", math.nan))),
        "category_missing": ("no category", pr(delk(p1, "category"))),
        "category_null": ("category null", pr(setk(p1, "category", None))),
        "category_empty": ('category ""', pr(setk(p1, "category", ""))),
        "not_json": ("not JSON", "hello\nworld\n"),
        "line_list": ("a line that is a list", pr(lambda r: [r[0], "[1, 2]"])),
        "non_utf8": ("invalid UTF-8 bytes", pr(lambda r: None).encode().replace(b"psychology", b"psy\xff\xfechology")),
        "empty_file": ("an empty file", ""),
        "blank_lines": ("only blank lines", "\n \n\n"),
        "huge_line": (f"a prediction of {HUGE >> 20} MiB",
                      lambda ctx: pr(setk(p1, "prediction", lambda: "x " * (HUGE // 2)))),
        "deep_nesting": (f"a line nested {DEEP} deep", pr(lambda r: [r[0], deep_list_text()])),
        "deep_nesting_answer": (f"an answer nested {DEEP} deep", pr(lambda r: jsonl(r[:1]) + json.dumps(r[1])[:-1]
                                                                     .replace('"answer": "2022"', '"answer": '
                                                                              + deep_list_text()) + "}\n")),
        "bigint": ("a number with 5000 digits", pr(lambda r: jsonl(r[:1]) + '{"id": "x", "prediction": '
                                                   + "9" * 5000 + ', "answer": "a", "category": 1}\n')),
    }
    cases = [Case(f"score.{k}", "score", desc, score_on(), write("pred.jsonl", data), expect=("{work}/pred.jsonl",))
             for k, (desc, data) in specs.items()]
    cases += [
        Case("score.torn_last_line", "score", "a torn last line", score_on(),
             write("pred.jsonl", pr(lambda r: jsonl(r[:2]) + json.dumps(r[2])[:30])), expect=("{work}/pred.jsonl",),
             ok_if_success=True, recovery=r"(?i)torn|truncat|incomplete"),
        Case("score.bom", "score", "a UTF-8 byte-order mark", score_on(),
             write("pred.jsonl", lambda ctx: b"\xef\xbb\xbf" + pr(lambda r: None).encode()),
             expect=("{work}/pred.jsonl",),
             ok_if_success=True, recovery=r"n=3 "),
        Case("score.nonexistent", "score", "predictions= a file that does not exist", score_on("{work}/nope.jsonl"),
             expect=("nope.jsonl",)),
        Case("score.directory", "score", "predictions= a folder without predictions.jsonl", score_on("{work}/dir"),
             lambda work, ctx: (work / "dir").mkdir(), expect=("{work}/dir",)),
        Case("score.unset", "score", "predictions= left empty", score_on(""), expect=("predictions",)),
        Case("score.control", "score", "a valid prediction file (control)", score_on(),
             write("pred.jsonl", pr(lambda r: None)), control=True),
    ]
    return cases


# ---- config overrides -----------------------------------------------------------------------------

def eval_locomo() -> list[str]:
    return eval_on("locomo", "{fixtures}/base_locomo.json")


def config_eval_cases() -> list[Case]:
    over = {  # override(s) → the key(s) a clear error names
        "limit_neg": (["limit=-1"], ("limit",)),
        "limit_abc": (["limit=abc"], ("limit",)),
        "limit_float": (["limit=1.5"], ("limit",)),
        "seed_abc": (["seed=abc"], ("seed",)),
        "max_retries_neg": (["llm.max_retries=-1"], ("max_retries",)),
        "timeout_zero": (["llm.timeout_s=0"], ("timeout_s",)),
        "base_url_notaurl": (["llm.base_url=notaurl"], ("base_url", "notaurl")),
        "base_url_ftp": (["llm.base_url=ftp://127.0.0.1/v1"], ("base_url", "ftp")),
        "base_url_empty": (["llm.base_url="], ("base_url",)),
        "concurrency_zero": (["llm.concurrency=0"], ("concurrency",)),
        "backoff_neg": (["llm.backoff_s=-1"], ("backoff",)),
        "max_consecutive_neg": (["llm.max_consecutive_failures=-1"], ("max_consecutive_failures",)),
        "context_window_zero": (["llm.context_window=0"], ("context_window",)),
        "preflight_timeout_zero": (["llm.preflight_timeout_s=0"], ("preflight_timeout_s",)),
        "model_empty": (["llm.model="], ("model",)),
        "model_not_served": (["llm.model=gpt-17"], ("gpt-17",)),
        "api_key_env_bad_name": (["llm.api_key_env=not a name!"], ("api_key_env",)),
        "max_new_tokens_zero": (["memory.max_new_tokens=0"], ("max_new_tokens",)),
        "max_failed_fraction_2": (["max_failed_fraction=2"], ("max_failed_fraction",)),
        "metrics_unknown": (["metrics=[nope]"], ("nope",)),
        "metrics_empty": (["metrics=[]"], ("metrics",)),
        "unknown_key": (["nope=1"], ("nope",)),
        "unknown_nested_key": (["memory.top_k=-1"], ("top_k",)),
        "memory_unknown": (["memory=nope"], ("nope",)),
        "dataset_unknown": (["dataset=nope"], ("nope",)),
        "method_unknown": (["method=nope"], ("nope",)),
        "judge_llm_bad": (["judge_llm=nope"], ("judge_llm",)),
        "dataset_limit_neg": (["dataset.limit=-1"], ("limit",)),
        "dataset_categories_9": (["dataset.categories=[9]"], ("9", "categor")),
        "dataset_conversations_unknown": (["dataset.conversations=[conv-99]"], ("conv-99",)),
        "checkpoint_nonexistent": (["method=lm", "model=tiny", "checkpoint={work}/nope"], ("nope",)),
        "rag_chunk_size_zero": (["memory=rag", "memory.chunk_size=0"], ("chunk_size",)),
        "rag_k_neg": (["memory=rag", "memory.k=-1"], ("memory.k", "k")),
        "rag_overlap_gt_chunk": (["memory=rag", "memory.overlap=5"], ("overlap",)),
        "rag_granularity_bad": (["memory=rag", "memory.granularity=foo"], ("granularity", "foo")),
        "rag_index_bad": (["memory=rag", "memory.index=foo"], ("index", "foo")),
        "embedder_batch_size_zero": (["memory=rag", "embedder.batch_size=0"], ("batch_size",)),
    }
    cases = [Case(f"config_eval.{k}", "config_eval", " ".join(args), eval_locomo() + args, expect=exp)
             for k, (args, exp) in over.items()]
    cases += [
        Case("config_eval.dataset_path_nonexistent", "config_eval", "dataset.path=/nonexistent",
             eval_on("locomo", "{work}/nonexistent.json"), expect=("nonexistent.json",)),
        Case("config_eval.dataset_path_dir", "config_eval", "dataset.path= a folder", eval_on("locomo", "{work}/dir"),
             lambda work, ctx: (work / "dir").mkdir(), expect=("{work}/dir",)),
        Case("config_eval.run_dir_is_file", "config_eval", "hydra.run.dir= an existing file",
             [a for a in eval_locomo() if not a.startswith("hydra.run.dir=")] + ["hydra.run.dir={work}/afile"],
             write("afile", "x"), expect=("afile",)),
        Case("config_eval.control", "config_eval", "the base eval (control)", eval_locomo(), control=True),
    ]
    return cases


def config_train_cases() -> list[Case]:
    over = {
        "batch_size_zero": (["trainer.batch_size=0"], ("batch_size",)),
        "grad_accum_zero": (["trainer.grad_accum=0"], ("grad_accum",)),
        "lr_neg": (["trainer.lr=-1"], ("lr",)),
        "lr_abc": (["trainer.lr=abc"], ("lr",)),
        "lr_nan": (["trainer.lr=nan"], ("lr",)),
        "max_steps_neg": (["trainer.max_steps=-5"], ("max_steps",)),
        "scheduler_foo": (["trainer.scheduler=foo"], ("scheduler", "foo")),
        "warmup_ratio_2": (["trainer.warmup_ratio=2"], ("warmup_ratio",)),
        "warmup_steps_neg": (["trainer.warmup_steps=-3"], ("warmup_steps",)),
        "eval_fraction_gt1": (["trainer.eval_fraction=1.5"], ("eval_fraction",)),
        "save_every_neg": (["trainer.save_every=-1"], ("save_every",)),
        "keep_checkpoints_neg": (["trainer.keep_checkpoints=-1"], ("keep_checkpoints",)),
        "precision_fp8": (["trainer.precision=fp8"], ("precision", "fp8")),
        "max_grad_norm_neg": (["trainer.max_grad_norm=-1"], ("max_grad_norm",)),
        "log_every_zero": (["trainer.log_every=0"], ("log_every",)),
        "eval_every_neg": (["trainer.eval_every=-1"], ("eval_every",)),
        "max_eval_batches_neg": (["trainer.max_eval_batches=-1"], ("max_eval_batches",)),
        "betas_out_of_range": (["trainer.betas=[2,0.9]"], ("betas",)),
        "weight_decay_neg": (["trainer.weight_decay=-1"], ("weight_decay",)),
        "num_workers_neg": (["trainer.num_workers=-1"], ("num_workers",)),
        "stop_after_neg": (["trainer.stop_after=-1"], ("stop_after",)),
        "seq_len_zero": (["method.seq_len=0"], ("seq_len",)),
        "lora_r_zero": (["method.lora.r=0"], ("lora.r", "r")),
        "lora_dropout_2": (["method.lora.dropout=2"], ("dropout",)),
        "model_heads_not_divisor": (["model.num_heads=3"], ("num_heads", "hidden_size")),
        "model_hidden_zero": (["model.hidden_size=0"], ("hidden_size",)),
        "seed_abc": (["seed=abc"], ("seed",)),
        "seed_neg": (["seed=-1"], ("seed",)),
        "checkpoint_nonexistent": (["checkpoint={work}/nope"], ("nope",)),
        "resume_nonexistent": (["trainer.resume={work}/nope"], ("nope",)),
        "method_unknown": (["method=nope"], ("nope",)),
        "model_unknown": (["model=nope"], ("nope",)),
        "unknown_key": (["trainer.lrr=0.1"], ("lrr",)),
        "model_path_nonexistent": (["model=hf", "model.path={work}/nope"], ("nope",)),
    }
    cases = [Case(f"config_train.{k}", "config_train", " ".join(args), TRAIN + args, expect=exp)
             for k, (args, exp) in over.items()]
    cases += [
        Case("config_train.dataset_path_nonexistent", "config_train", "dataset=text dataset.path=/nonexistent",
             TRAIN + ["dataset=text", "dataset.path={work}/nope.txt"], expect=("nope.txt",)),
        Case("config_train.dataset_path_empty_dir", "config_train", "dataset=text dataset.path= an empty folder",
             TRAIN + ["dataset=text", "dataset.path={work}/dir"], lambda work, ctx: (work / "dir").mkdir(),
             expect=("{work}/dir",)),
        Case("config_train.dataset_empty_file", "config_train", "dataset=text dataset.path= an empty file",
             TRAIN + ["dataset=text", "dataset.path={work}/empty.txt"], write("empty.txt", ""), expect=("empty.txt",)),
        Case("config_train.control", "config_train", "the base train (control)", TRAIN, control=True),
    ]
    return cases


# ---- the fake server misbehaving ------------------------------------------------------------------

SERVER_MODES = {  # mode → what the fake server does (harness.FakeServer implements each)
    "close_mid": "chat: Content-Length 500, 6 bytes, then close",
    "http500": "chat: HTTP 500 every time",
    "nonjson": "chat: 200 with a body that is not JSON",
    "choices_empty": "chat: choices: []",
    "choices_not_list": 'chat: choices: "x"',
    "choice_string": 'chat: choices: ["x"]',
    "content_null": "chat: content null",
    "content_number": "chat: content 5",
    "message_missing": "chat: a choice without message",
    "body_list": "chat: the body is a JSON list",
    "truncated_json": "chat: a JSON body cut short, with a matching Content-Length",
    "usage_negative": "chat: usage with negative token counts",
    "http404": "chat: HTTP 404",
    "http401": "chat: HTTP 401",
    "hang": "chat: no reply for 30 s (llm.timeout_s=1)",
    "retry_after_huge": "chat: 429 with Retry-After: 100000",
    "bad_gzip": "chat: Content-Encoding gzip on a plain body",
    "models_nonjson": "/models: 200 with a body that is not JSON",
    "models_empty": "/models: an empty model list",
    "models_500": "/models: HTTP 500",
}


WARN_AND_GO_ON = {"usage_negative", "models_nonjson", "models_empty", "models_500"}


def server_cases() -> list[Case]:
    out = []
    for mode, desc in SERVER_MODES.items():
        extra = FAST_RETRY + (["llm.timeout_s=1", "llm.max_retries=1"] if mode == "hang" else [])
        if mode == "retry_after_huge":
            extra = ["llm.max_retries=1"]
        # the model list or the usage cannot be checked: the run goes on, saying so once (a recovery)
        warned = {"ok_if_success": True, "recovery": r"warning: llm=openai: .*(cannot check|not token counts)"} \
            if mode in WARN_AND_GO_ON else {}
        out.append(Case(f"server.{mode}", "server", desc, eval_locomo() + extra, server=mode, timeout=90,
                        expect=("fail", "llm", "server", "model", "reply", "http"), **warned))
    out.append(Case("server.control", "server", "the server answering well, with the retry settings (control)",
                    eval_locomo() + FAST_RETRY, control=True))
    return out


# ---- corrupted run files --------------------------------------------------------------------------

def ckpt_dir(work: Path, step: int) -> Path:
    return work / "run" / "checkpoints" / f"step_{step:07d}"


def sha256(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()


def reseal(ck: Path) -> None:
    """Rewrite MANIFEST.json as the trainer would have for the edited files (so the manifest check passes)."""
    files = sorted(p for p in ck.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    m = {p.relative_to(ck).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files}
    (ck / "MANIFEST.json").write_text(json.dumps(m, indent=2))


def copy_fixture(name: str, dest: str = "run") -> Make:
    def make(work: Path, ctx: dict) -> None:
        shutil.copytree(Path(ctx["fixtures"]) / name, work / dest, symlinks=True)
    return make


def corrupt(fixture: str, edit: Callable[[Path], None], sealed: bool = False, step: int | None = None,
            dest: str = "run") -> Make:
    """Copy a fixture run into {work}/run, apply ``edit(work)``; ``sealed``: reseal checkpoint ``step``."""
    def make(work: Path, ctx: dict) -> None:
        copy_fixture(fixture, dest)(work, ctx)
        edit(work)
        if sealed:
            reseal(ckpt_dir(work, step))
    return make


def cut(rel: str, frac: float = 0.5) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        p = work / rel
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * frac)])
    return edit


def put(rel: str, data: bytes | str | Callable[[Path], bytes | str]) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        p = work / rel
        d = data(p) if callable(data) else data
        p.write_bytes(d.encode() if isinstance(d, str) else d)
    return edit


def json_edit(rel: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        p = work / rel
        obj = json.loads(p.read_text())
        out = fn(obj)
        p.write_text(json.dumps(obj if out is None else out))
    return edit


def zeros(rel: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        p = work / rel
        p.write_bytes(b"\0" * p.stat().st_size)
    return edit


def evil_pickle(work: Path) -> bytes:
    return call_pickle("os", "system", f"touch {work}/{MARKER}")


def lines_edit(rel: str, fn: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        p = work / rel
        p.write_text("".join(ln + "\n" for ln in fn(p.read_text().splitlines())))
    return edit


def sweep_of(fixture: str, edit: Callable[[Path], None], good: bool = False) -> Make:
    """{work}/sweep/0 = a corrupted copy of the fixture (and {work}/sweep/1 an intact one when ``good``)."""
    def make(work: Path, ctx: dict) -> None:
        shutil.copytree(Path(ctx["fixtures"]) / fixture, work / "sweep" / "0")
        edit(work / "sweep" / "0")
        if good:
            shutil.copytree(Path(ctx["fixtures"]) / fixture, work / "sweep" / "1")
    return make


S2 = "run/checkpoints/step_0000002/"
S4 = "run/checkpoints/step_0000004/"
EXPORT = ["export", "checkpoint={work}/run", "out={work}/export"]
EVAL_CKPT = ["eval", "method=lm", "checkpoint={work}/run", "dataset=locomo", "dataset.path={fixtures}/base_locomo.json",
             "limit=1", "progress=false", "hydra.run.dir={work}/eval"]
REPORT_SWEEP = ["report", "sweep={work}/sweep", "plot=false"]
REPORT_TABLE = ["report", "table=mem0_locomo_table1", "runs={work}/sweep", "out={work}/table.md"]


def runfile_cases() -> list[Case]:
    one, two, ev = "train_one", "train_two", "eval_run"
    state = lambda fn: json_edit(S2 + "state.json", fn)  # noqa: E731
    c: list[tuple[str, str, list[str], Make, str, dict]] = [
        # (id, description, argv, make, fixture, extra Case fields)
        ("state_truncated", "state.json cut in half (manifest catches it)", TRAIN_RESUME,
         corrupt(one, cut(S2 + "state.json")), one, {}),
        ("state_truncated_sealed", "state.json cut in half, manifest rewritten", TRAIN_RESUME,
         corrupt(one, cut(S2 + "state.json"), True, 2), one, {}),
        ("state_garbage_sealed", "state.json garbage bytes, manifest rewritten", TRAIN_RESUME,
         corrupt(one, put(S2 + "state.json", b"\x00\xff garbage \x80"), True, 2), one, {}),
        ("state_step_str_sealed", 'state.json {"step": "x", ...}, manifest rewritten', TRAIN_RESUME,
         corrupt(one, state(lambda s: s.__setitem__("step", "x")), True, 2), one, {}),
        ("state_step_neg_sealed", 'state.json {"step": -3, ...}, manifest rewritten', TRAIN_RESUME,
         corrupt(one, state(lambda s: s.__setitem__("step", -3)), True, 2), one, {}),
        ("state_rng_str_sealed", 'state.json {"rng": "x", ...}, manifest rewritten', TRAIN_RESUME,
         corrupt(one, state(lambda s: s.__setitem__("rng", "x")), True, 2), one, {}),
        ("state_list_sealed", "state.json a JSON list, manifest rewritten", TRAIN_RESUME,
         corrupt(one, put(S2 + "state.json", "[1, 2]"), True, 2), one, {}),
        ("model_json_list_eval", "model.json a JSON list, manifest rewritten; eval checkpoint=", EVAL_CKPT,
         corrupt(one, put(S2 + "model.json", "[1]"), True, 2), one, {}),
        ("model_json_bad_value_eval", 'model.json {"hidden_size": "abc"}, manifest rewritten; eval checkpoint=',
         EVAL_CKPT, corrupt(one, json_edit(S2 + "model.json", lambda m: m.__setitem__("hidden_size", "abc")), True, 2),
         one, {}),
        ("method_json_garbage_eval", "method.json garbage, manifest rewritten; eval checkpoint=", EVAL_CKPT,
         corrupt(one, put(S2 + "method.json", "{{{"), True, 2), one, {}),
        ("weights_truncated_sealed", "trainable.safetensors cut in half, manifest rewritten", TRAIN_RESUME,
         corrupt(one, cut(S2 + "trainable.safetensors"), True, 2), one, {}),
        ("weights_zeroed", "trainable.safetensors zeroed (manifest catches it)", TRAIN_RESUME,
         corrupt(one, zeros(S2 + "trainable.safetensors")), one, {}),
        ("weights_header_huge_sealed", "trainable.safetensors header length 2**62, manifest rewritten; export",
         EXPORT, corrupt(one, put(S2 + "trainable.safetensors", struct.pack("<Q", 2 ** 62) + b"{}"), True, 2), one, {}),
        ("weights_garbage_eval_sealed", "trainable.safetensors garbage, manifest rewritten; eval checkpoint=",
         EVAL_CKPT, corrupt(one, put(S2 + "trainable.safetensors", b"not safetensors" * 10), True, 2), one, {}),
        ("optimizer_garbage_sealed", "optimizer.pt garbage, manifest rewritten", TRAIN_RESUME,
         corrupt(one, put(S2 + "optimizer.pt", b"garbage, not a torch file"), True, 2), one, {}),
        ("optimizer_malicious_sealed", "optimizer.pt a pickle calling os.system, manifest rewritten", TRAIN_RESUME,
         corrupt(one, put(S2 + "optimizer.pt", lambda p: evil_pickle(p.parents[3])), True, 2), one,
         {"malicious": True}),
        ("scheduler_garbage_sealed", "scheduler.pt garbage, manifest rewritten", TRAIN_RESUME,
         corrupt(one, put(S2 + "scheduler.pt", b"\x80\x02garbage"), True, 2), one, {}),
        ("manifest_garbage", "MANIFEST.json garbage", TRAIN_RESUME, corrupt(one, put(S2 + "MANIFEST.json", "{nope")),
         one, {}),
        ("manifest_list", "MANIFEST.json a JSON list", TRAIN_RESUME, corrupt(one, put(S2 + "MANIFEST.json", "[]")),
         one, {}),
        ("manifest_garbage_export", "MANIFEST.json garbage; export", EXPORT,
         corrupt(one, put(S2 + "MANIFEST.json", "{nope")), one, {}),
        ("metrics_garbage_middle", "metrics.jsonl a garbage line in the middle", TRAIN_RESUME,
         corrupt(one, lines_edit("run/metrics.jsonl", lambda ls: ls[:1] + ["{garbage"] + ls[1:])), one, {}),
        ("metrics_non_utf8", "metrics.jsonl with invalid UTF-8", TRAIN_RESUME,
         corrupt(one, put("run/metrics.jsonl", lambda p: p.read_bytes()[:20] + b"\xff\xfe" + p.read_bytes()[20:])),
         one, {}),
        ("metrics_wrong_type", 'metrics.jsonl a line {"step": "x"}', TRAIN_RESUME,
         corrupt(one, lines_edit("run/metrics.jsonl", lambda ls: ['{"step": "x", "loss": 1.0}'] + ls)), one, {}),
        ("run_json_garbage", ".ctxbench/run.json garbage", TRAIN_RESUME,
         corrupt(one, put("run/.ctxbench/run.json", "{garbage")), one, {}),
        ("run_json_list", ".ctxbench/run.json a JSON list", TRAIN_RESUME,
         corrupt(one, put("run/.ctxbench/run.json", "[1]")), one, {}),
        ("train_summary_garbage_report", "train_summary.json garbage; report sweep=", REPORT_SWEEP,
         sweep_of(two, put("train_summary.json", "{nope")), two, {}),
        ("metrics_list_report", "metrics.jsonl lines that are lists; report sweep=", REPORT_SWEEP,
         sweep_of(two, put("metrics.jsonl", "[1]\n[2]\n")), two, {}),
        # eval run folder (2 answered of 5; the rerun answers up to 4)
        ("predictions_garbage_middle", "predictions.jsonl a garbage line in the middle; eval rerun", EVAL_RERUN,
         corrupt(ev, lines_edit("run/predictions.jsonl", lambda ls: ls[:1] + ["{garbage"] + ls[1:])), ev, {}),
        ("predictions_wrong_type", "predictions.jsonl a line that is a list; eval rerun", EVAL_RERUN,
         corrupt(ev, lines_edit("run/predictions.jsonl", lambda ls: ls[:1] + ["[1, 2]"] + ls[1:])), ev, {}),
        ("predictions_id_missing", "predictions.jsonl a record without id; eval rerun", EVAL_RERUN,
         corrupt(ev, lines_edit("run/predictions.jsonl", lambda ls: ls[:1] + ['{"prediction": "x"}'])), ev, {}),
        ("predictions_non_utf8", "predictions.jsonl with invalid UTF-8; eval rerun", EVAL_RERUN,
         corrupt(ev, put("run/predictions.jsonl", lambda p: p.read_bytes()[:30] + b"\xff\xfe" + p.read_bytes()[30:])),
         ev, {}),
        ("predictions_garbage_score", "predictions.jsonl a garbage line; score predictions=RUN",
         ["score", "predictions={work}/run", "progress=false", "hydra.run.dir={work}/score"],
         corrupt(ev, lines_edit("run/predictions.jsonl", lambda ls: ls[:1] + ["{garbage"] + ls[1:])), ev, {}),
        ("results_garbage_report", "results.json garbage; report sweep=", REPORT_SWEEP,
         sweep_of(ev, put("results.json", "{nope")), ev, {}),
        ("results_list_report", "results.json a JSON list; report sweep=", REPORT_SWEEP,
         sweep_of(ev, put("results.json", "[1, 2]")), ev, {}),
        ("results_overall_str_report", 'results.json {"overall": "x"}; report sweep=', REPORT_SWEEP,
         sweep_of(ev, json_edit("results.json", lambda r: r.__setitem__("overall", "x"))), ev, {}),
        ("results_list_table", "results.json a JSON list; report table= (the table is printed without it)",
         REPORT_TABLE, sweep_of(ev, put("results.json", "[1, 2]")), ev,
         {"ok_if_success": True, "recovery": r"(?i)skipped .*results\.json"}),
        ("hydra_config_garbage_report", ".hydra/config.yaml garbage; report sweep=", REPORT_SWEEP,
         sweep_of(ev, put(".hydra/config.yaml", "a: [b\n: - :")), ev, {}),
        ("eval_run_json_garbage", ".ctxbench/run.json garbage; eval rerun", EVAL_RERUN,
         corrupt(ev, put("run/.ctxbench/run.json", "{garbage")), ev, {}),
        ("llm_cache_garbage", "the LLM cache file garbage bytes; eval rerun", EVAL_RERUN,
          _eval_with_cache(ev, lambda p: p.write_bytes(b"not a sqlite database" * 50)), ev, {}),
        ("llm_cache_truncated", "the LLM cache file cut in half; eval rerun", EVAL_RERUN,
         _eval_with_cache(ev, lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])), ev, {}),
    ]
    cases = [Case(f"runfiles.{i}", "runfiles", d, argv, make, needs=(fx,), expect=named_files(d), **kw)
             for i, d, argv, make, fx, kw in c]
    cases += [
        Case("runfiles.predictions_torn_last", "runfiles", "predictions.jsonl a torn last line; eval rerun",
             EVAL_RERUN, corrupt(ev, put("run/predictions.jsonl", lambda p: p.read_bytes()[:-20])), needs=(ev,),
             ok_if_success=True, recovery=r"(?i)torn"),
        Case("runfiles.metrics_torn_last", "runfiles", "metrics.jsonl a torn last line; train resume", TRAIN_RESUME,
             corrupt(one, put("run/metrics.jsonl", lambda p: p.read_bytes() + b'{"step": 3, "lo')), needs=(one,),
             ok_if_success=True, recovery=r"(?i)torn last line"),
        Case("runfiles.latest_zeroed_earlier_intact", "runfiles",
             "newest checkpoint's weights zeroed, an earlier one intact; train resume", TRAIN_RESUME,
             corrupt(two, zeros(S4 + "trainable.safetensors")), needs=(two,), ok_if_success=True, must_recover=True,
             recovery=r"(?is)skipping a damaged checkpoint.*step_0000002"),
        Case("runfiles.latest_state_bad_sealed_earlier_intact", "runfiles",
             "newest checkpoint's state.json garbage (manifest rewritten), an earlier one intact; train resume",
             TRAIN_RESUME, corrupt(two, put(S4 + "state.json", "{nope"), True, 4), needs=(two,), ok_if_success=True,
             must_recover=True,
             recovery=r"(?is)(skipp|fall).*step_0000002"),
        Case("runfiles.latest_weights_bad_sealed_earlier_intact", "runfiles",
             "newest checkpoint's weights garbage (manifest rewritten), an earlier one intact; train resume",
             TRAIN_RESUME, corrupt(two, put(S4 + "trainable.safetensors", b"garbage" * 9), True, 4), needs=(two,),
             ok_if_success=True, must_recover=True, recovery=r"(?is)(skipp|fall).*step_0000002"),
        Case("runfiles.results_garbage_one_of_two", "runfiles",
             "results.json garbage in one of two runs; report sweep= (the other still reported)", REPORT_SWEEP,
             sweep_of(ev, put("results.json", "{nope"), good=True), needs=(ev,), ok_if_success=True,
             recovery=r"(?i)skipped"),
        Case("runfiles.control_resume", "runfiles", "an intact run resumed (control)", TRAIN_RESUME,
             copy_fixture(one), needs=(one,), control=True),
        Case("runfiles.control_eval_rerun", "runfiles", "an intact eval run rerun (control)", EVAL_RERUN,
             _eval_with_cache(ev, lambda p: None), needs=(ev,), control=True),
    ]
    return cases


def named_files(description: str) -> tuple[str, ...]:
    """The run files a description names (a clear error names one of them)."""
    found = tuple(re.findall(r"[\w.]+\.(?:jsonl|json|pt|safetensors|yaml)\b", description))
    return found or ("cache", "sqlite")


def _eval_with_cache(fixture: str, edit: Callable[[Path], None]) -> Make:
    """The eval fixture copied with its LLM cache file (``llm.cache_path={work}/run_cache.sqlite``) edited."""
    def make(work: Path, ctx: dict) -> None:
        copy_fixture(fixture)(work, ctx)
        shutil.copy(Path(ctx["fixtures"]) / f"{fixture}_cache.sqlite", work / "run_cache.sqlite")
        edit(work / "run_cache.sqlite")
    return make


def all_cases() -> list[Case]:
    """Every case, in group order (the "faults" group's cases live in their own files)."""
    from bad_input import faults_memfault, faults_osfault, faults_probe, faults_runfolder, faults_server  # they build on this module's helpers

    faults = [c for m in (faults_runfolder, faults_server, faults_probe, faults_memfault, faults_osfault) for c in m.cases()]
    return (locomo_cases() + pwc_cases() + dialsim_cases() + score_cases() + config_eval_cases()
            + config_train_cases() + server_cases() + runfile_cases() + faults)
