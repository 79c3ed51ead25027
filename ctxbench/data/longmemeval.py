"""LongMemEval (Wu et al., ICLR 2025; xiaowu0162/LongMemEval): 500 questions, each over its own haystack.

The released files (``longmemeval_s_cleaned.json``, ``longmemeval_m_cleaned.json``,
``longmemeval_oracle.json``; the un-"cleaned" ``longmemeval_s.json`` / ``longmemeval_m.json`` too) are
one JSON list of entries ``{question_id, question_type, question, answer, question_date,
haystack_session_ids, haystack_dates, haystack_sessions, answer_session_ids}``; a session is a list of
``{role: user|assistant, content, has_answer?}``. Each entry becomes one :class:`Sample`: a history
(id = question_id, speakers user/assistant) of its haystack sessions **in time order**, turn ids
``<session id>_<k>`` (k from 1, as LongMemEval's retrieval code numbers them), ``Turn.meta["has_answer"]``
on evidence turns; and one question (category = question_type; abstention questions, ids ending
``_abs``, keep their type and carry ``meta["abstention"]``), ``evidence`` = the has_answer turn ids,
``meta`` = ``question_date``, ``evidence_sessions`` (answer_session_ids), ``abstention``, ``release``,
``retrieval_gold`` (LongMemEval's retrieval gold, user-side evidence only: :func:`retrieval_gold`).

Invariants, each a one-line :class:`DataError` naming the file, the question id and the field: the
three haystack lists have equal length; turns have role user|assistant and string content; every
answer_session_id is in the haystack; question_type is one of the six; question ids are unique;
question_date and every haystack date parse (:func:`ctxbench.data.dates.parse_session_date`); an
evidence session is not dated on a later day than its question.

Odd-but-valid records, handled and counted in ``Samples.quirks``:

- ``sessions_after_question``: a non-evidence session dated after its question is dropped (unless
  ``dataset.after_question=keep``, LongMemEval's own: every haystack session is read; then counted in
  ``sessions_after_question_kept``), so no
  history holds a session from the question's future (LongMemEval_S has 77 questions asked earlier
  on the day of their last session, xiaowu0162/LongMemEval#8);
- ``evidence_after_question_same_day``: an evidence session later on the question's own day is kept
  (dropping it would remove the answer; a later *day* is refused);
- ``sessions_reordered``: questions whose haystack was not listed in time order (the oracle release);
- ``duplicate_sessions``: a session id listed twice in one haystack with the same turns (13 filler
  sessions of LongMemEval_S, xiaowu0162/LongMemEval#54): the earlier copy is kept;
- ``session_id_with_other_content``: one session id with different turns in two haystacks (not shared);
- ``non_string_answers`` (integers become their text), ``empty_sessions``, ``empty_turns``,
  ``evidence_turns_outside_answer_sessions``, ``questions_without_evidence_turns``.

Turns of a session id met again with the same content are shared between histories (the S and M
releases draw their haystacks from one pool), which keeps M's ~2.7 GB in memory once. The file is read
one entry at a time (:func:`ctxbench.data.records.iter_json_array`, plain ``json``: ``ijson`` is not a
dependency), so M is read although it is past ``MAX_FILE_BYTES``.

Subsetting (:func:`select`): ``dataset.questions=[ids]``, ``dataset.question_types=[types]``
(``abstention`` selects the ``_abs`` questions), ``dataset.limit=N`` (first N questions), in that order.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.data.categories import ABSTENTION_SUFFIX
from ctxbench.data.dates import parse_session_date
from ctxbench.data.errors import DataError
from ctxbench.data.invariants import answer_text, check_samples, nonblank
from ctxbench.data.records import field, iter_json_array, short_repr, short_text
from ctxbench.data.samples import Samples, keep_histories
from ctxbench.data.sessions import distinct_sessions  # noqa: F401  (re-exported: data stats, tests)
from ctxbench.data.sources import downloads_dir, locate

QUESTION_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                  "multi-session", "temporal-reasoning", "knowledge-update")
ABSTENTION = "abstention"  # not a question_type: the ``_abs`` questions, selectable in dataset.question_types
ROLES = ("user", "assistant")
RELEASES = ("s", "m", "oracle")
RELEASE_FILES = {
    "s": ("longmemeval_s_cleaned.json", "longmemeval_s.json"),
    "m": ("longmemeval_m_cleaned.json", "longmemeval_m.json"),
    "oracle": ("longmemeval_oracle.json",),
}
QUIRKS = ("sessions_after_question", "sessions_after_question_kept", "evidence_after_question_same_day", "sessions_reordered", "duplicate_sessions",
          "session_id_with_other_content", "non_string_answers", "empty_sessions", "empty_turns",
          "evidence_turns_outside_answer_sessions", "questions_without_evidence_turns")
DATE_EXAMPLE = "2023/05/20 (Sat) 02:21"


def release_of(path: Path) -> str:
    """The release a file name says (``longmemeval_s_cleaned.json`` → ``s``), else ``sample``."""
    name = Path(path).name.lower()
    if "oracle" in name:
        return "oracle"
    m = re.match(r"longmemeval_([sm])(_cleaned)?\b", name)
    return m.group(1) if m else "sample"


def _signature(turns: list[Turn]) -> list[tuple[str, str, bool]]:
    return [(t.speaker, t.text, bool(t.meta.get("has_answer"))) for t in turns]


class _Pool:
    """Turn lists by session id, shared between histories when the content is the same."""

    def __init__(self, quirks: Counter):
        self.turns: dict[str, list[Turn]] = {}
        self.quirks = quirks

    def get(self, sid: str, turns: list[Turn]) -> list[Turn]:
        have = self.turns.get(sid)
        if have is None:
            self.turns[sid] = turns
            return turns
        if have is turns or _signature(have) == _signature(turns):
            return have
        self.quirks["session_id_with_other_content"] += 1
        return turns


def _turns(raw: Any, path: Path, rec: str, j: int, sid: str, quirks: Counter) -> list[Turn]:
    where = f"haystack_sessions[{j}]"
    if not isinstance(raw, list):
        raise DataError(path, f"expected a list of turns, got {type(raw).__name__} ({short_repr(raw)})", record=rec,
                        field=where)
    if not raw:
        quirks["empty_sessions"] += 1
    turns = []
    for k, t in enumerate(raw):
        prefix = f"{where}[{k}]."
        role = field(t, "role", str, path, rec, prefix=prefix)
        if role not in ROLES:
            raise DataError(path, f"role must be user or assistant, got {short_repr(role)}", record=rec,
                            field=f"{prefix}role")
        content = field(t, "content", str, path, rec, prefix=prefix)
        if not content.strip():
            quirks["empty_turns"] += 1
        has_answer = field(t, "has_answer", bool, path, rec, default=False, prefix=prefix)
        turns.append(Turn(speaker=role, text=content, id=f"{sid}_{k + 1}",
                          meta={"has_answer": True} if has_answer else {}))
    return turns


RETRIEVAL_GOLD = "retrieval_gold"  # Question.meta / the prediction record: LongMemEval's retrieval gold


def retrieval_gold(slots: list[tuple[Any, ...]], answer_ids: list[str]) -> dict[str, Any]:
    """LongMemEval's retrieval gold (``src/retrieval/run_retrieval.py``), which indexes user turns only: the
    user turns with ``has_answer`` in an answer session (``turns``), the answer sessions holding one
    (``sessions``; an answer session without user-side evidence is relabelled ``noans`` there, not gold),
    and ``has_target``: whether any user turn of the whole haystack (sessions dropped after the question
    included) has ``has_answer`` — its averages skip the questions without one."""
    answer = set(answer_ids)
    user = [(s[2], t) for s in slots for t in s[4] if t.speaker == "user" and t.meta.get("has_answer")]
    turns = list(dict.fromkeys(t.id for sid, t in user if sid in answer))
    sessions = [a for a in dict.fromkeys(answer_ids) if any(sid == a for sid, _ in user)]
    return {"turns": turns, "sessions": sessions, "has_target": bool(user)}


def _entry(raw: Any, path: Path, i: int, release: str, quirks: Counter, pool: _Pool, keep_after: bool = False) -> Sample:
    qid = field(raw, "question_id", str, path, f"index {i}")
    nonblank(qid, path, f"index {i}", "question_id")
    rec = short_text(qid, 60)
    qtype = field(raw, "question_type", str, path, rec)
    if qtype not in QUESTION_TYPES:
        raise DataError(path, f"question_type {short_repr(qtype)} is not one of {', '.join(QUESTION_TYPES)}",
                        record=rec, field="question_type")
    question = nonblank(field(raw, "question", str, path, rec), path, rec, "question")
    answer = field(raw, "answer", (str, int, float), path, rec)
    if not isinstance(answer, str):
        quirks["non_string_answers"] += 1
    answer = nonblank(answer_text(answer, path, rec, "answer"), path, rec, "answer")
    qdate = field(raw, "question_date", str, path, rec)
    qtime = parse_session_date(qdate)
    if qtime is None:
        raise DataError(path, f"cannot be read as a date ({short_repr(qdate)}; expected like {DATE_EXAMPLE!r})",
                        record=rec, field="question_date")
    ids = field(raw, "haystack_session_ids", list, path, rec)
    dates = field(raw, "haystack_dates", list, path, rec)
    sessions_raw = field(raw, "haystack_sessions", list, path, rec)
    for name, lst in (("haystack_dates", dates), ("haystack_sessions", sessions_raw)):
        if len(lst) != len(ids):
            raise DataError(path, f"has {len(lst)} entries but haystack_session_ids has {len(ids)}; the three "
                                  "haystack lists must have equal length", record=rec, field=name)
    answer_ids = field(raw, "answer_session_ids", list, path, rec)
    for k, a in enumerate(answer_ids):
        if not isinstance(a, str):
            raise DataError(path, f"expected a string, got {type(a).__name__}", record=rec,
                            field=f"answer_session_ids[{k}]")
        if a not in ids:
            raise DataError(path, f"session {short_repr(a)} is not in haystack_session_ids", record=rec,
                            field=f"answer_session_ids[{k}]")
    evidence_sessions = set(answer_ids)
    slots = []
    for j, (sid, date) in enumerate(zip(ids, dates)):
        if not isinstance(sid, str) or not sid.strip():
            raise DataError(path, f"expected a non-empty string, got {short_repr(sid)}", record=rec,
                            field=f"haystack_session_ids[{j}]")
        if not isinstance(date, str):
            raise DataError(path, f"expected a string, got {type(date).__name__}", record=rec,
                            field=f"haystack_dates[{j}]")
        when = parse_session_date(date)
        if when is None:
            raise DataError(path, f"cannot be read as a date ({short_repr(date)}; expected like {DATE_EXAMPLE!r})",
                            record=rec, field=f"haystack_dates[{j}]")
        slots.append((when, j, sid, date, _turns(sessions_raw[j], path, rec, j, sid, quirks)))
    ordered = sorted(slots, key=lambda s: (s[0], s[1]))
    if [s[1] for s in ordered] != [s[1] for s in slots]:
        quirks["sessions_reordered"] += 1
    sessions: list[Session] = []
    seen: dict[str, list[Turn]] = {}
    for when, j, sid, date, turns in ordered:
        if when > qtime and sid not in evidence_sessions:
            if not keep_after:
                quirks["sessions_after_question"] += 1
                continue
            quirks["sessions_after_question_kept"] += 1  # LongMemEval reads the whole haystack
        elif when > qtime:
            if when.date() > qtime.date():
                raise DataError(path, f"evidence session {short_repr(sid)} is dated {date!r}, after question_date "
                                      f"{qdate!r}", record=rec, field=f"haystack_dates[{j}]")
            quirks["evidence_after_question_same_day"] += 1
        if sid in seen:
            if _signature(seen[sid]) != _signature(turns):
                raise DataError(path, f"session {short_repr(sid)} is listed twice with different turns", record=rec,
                                field=f"haystack_session_ids[{j}]")
            quirks["duplicate_sessions"] += 1
            continue
        seen[sid] = turns
        sessions.append(Session(id=sid, turns=pool.get(sid, turns), date=date))
    evidence = [t.id for s in sessions for t in s.turns if t.meta.get("has_answer")]
    quirks["evidence_turns_outside_answer_sessions"] += sum(
        1 for s in sessions if s.id not in evidence_sessions for t in s.turns if t.meta.get("has_answer"))
    if not evidence:
        quirks["questions_without_evidence_turns"] += 1
    q = Question(id=qid, question=question, answer=answer, category=qtype, category_name=qtype, evidence=evidence,
                 meta={"question_date": qdate, "evidence_sessions": list(answer_ids),
                       "abstention": qid.endswith(ABSTENTION_SUFFIX), "release": release,
                       RETRIEVAL_GOLD: retrieval_gold(slots, answer_ids)})
    return Sample(History(id=qid, sessions=sessions, speakers=list(ROLES)), [q])


def load_longmemeval_file(path: Path, release: str | None = None, keep_after: bool = False) -> Samples:
    """Every entry of a LongMemEval-format file as one sample, with quirk counts. ``release`` (s, m, oracle,
    sample) labels the questions; None = from the file name (:func:`release_of`). ``keep_after``: keep the
    sessions dated after their question (LongMemEval's reading; ctxbench drops them by default)."""
    path = Path(path)
    release = release or release_of(path)
    quirks: Counter = Counter({k: 0 for k in QUIRKS})
    pool = _Pool(quirks)
    samples: list[Sample] = []
    seen: set[str] = set()
    for i, raw in iter_json_array(path):
        s = _entry(raw, path, i, release, quirks, pool, keep_after)
        if s.history.id in seen:
            raise DataError(path, "duplicate question_id", record=short_text(s.history.id, 60), field="question_id")
        seen.add(s.history.id)
        samples.append(s)
    check_samples(samples, path, conversational=True, categories=QUESTION_TYPES, questions="each")
    return Samples(samples, source=str(path), quirks=quirks)


def release_path(path: str | None, release: str) -> Path:
    """The file to read: ``dataset.path`` itself, the release's file inside a ``dataset.path`` folder, or in
    data/downloads/ when no path is given."""
    if release not in RELEASE_FILES:
        return locate(path, "longmemeval")
    hint = f"download it with `python -m ctxbench data download longmemeval` or set dataset.path=/path/to/file"
    folder = downloads_dir() if path in (None, "") else None
    if folder is None:
        p = locate(path, "longmemeval")
        if not p.is_dir():
            return p
        folder = p
    for name in RELEASE_FILES[release]:
        if (folder / name).is_file():
            return folder / name
    raise DataError(folder / RELEASE_FILES[release][0], f"not found (release={release}: "
                                                        f"{' or '.join(RELEASE_FILES[release])}); {hint}")


def select(samples: Samples, question_types: Iterable[str] | None = None, questions: Iterable[str] | None = None,
           limit: int | None = None) -> Samples:
    """Subset by question id, question type (``abstention`` = the ``_abs`` questions) and the first N."""
    out = list(samples)
    if isinstance(questions, str):
        questions = [questions]
    if questions:
        out = keep_histories(out, questions, samples.source, "dataset.questions", "question id(s)")
    if isinstance(question_types, str):
        question_types = [question_types]
    if question_types:
        types = [str(t) for t in question_types]
        bad = [t for t in types if t not in QUESTION_TYPES + (ABSTENTION,)]
        if bad:
            raise DataError(samples.source, f"unknown question type(s) {bad}; types: "
                                            f"{', '.join(QUESTION_TYPES + (ABSTENTION,))}", field="dataset.question_types")
        out = [s for s in out if any(q.category in types or (ABSTENTION in types and q.meta.get("abstention"))
                                     for q in s.questions)]
    if limit is not None:
        if int(limit) < 0:
            raise DataError(samples.source, f"must be >= 0, got {limit}", field="dataset.limit")
        out = out[: int(limit) or None]
    return samples.derive(out)


@register("dataset", "longmemeval", aliases=("longmemeval_sample",))
def load_longmemeval(cfg: Any) -> Samples:
    release = str(cfg.release or "s")
    samples = load_longmemeval_file(release_path(cfg.path, release),
                                    release=release, keep_after=str(cfg.after_question) == "keep")
    samples.log_quirks("longmemeval")
    return select(samples, cfg.question_types, cfg.questions, cfg.limit)


load_longmemeval.judge = "longmemeval"  # the judge llm_judge uses when judge.panel is unset (metrics/judges/panel.py)
