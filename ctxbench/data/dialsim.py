"""DialSim (v1.0/v1.1): ``{friends,bigbang,theoffice}_dialsim.pickle``, read without running code.

Official layout (jiho283/Simulator ``simulator.py``)::

    data[episode][session] = {"script": str, "date": str,
                              "hard_q": {type: [question, ...]},        # temporal-KG questions
                              "easy_q": {type: {qid: question, ...}}}   # fan-quiz questions
    question = {"questions": {asker: phrasing, ..., "default": phrasing},
                "answer": str, "options": [A, B, C, D, E]}             # E = "I don't know"-style

hard types: past, cur, fu, past_cur, ... (12); easy types: ans_w_time, ans_wo_time,
before_event_unans, dont_know_unans, dont_know_unans_time.

A show is one continuous history (its episodes' sessions in order; ``dataset.per_episode=true`` for
one sample per episode) with every question of its sessions; ``Question.meta["session"]`` says after
which session it is asked. ``dataset.answer_format``: ``multi_choice`` (options A–E; an answer that
matches no option cannot be scored and is dropped and counted, as the official simulator skips it)
or ``open_ended`` (option E answers become "I don't know.", as the official open-ended format).
Scripts become turns "Speaker: line"; lines without a speaker continue the previous turn; credit
lines (Teleplay:/Story:) are skipped and stage directions ("[Scene: ...]") are narrator turns.

``dataset.sessions=N`` keeps each sample's first N sessions (of the show, or of each episode with
``per_episode=true``) and the questions asked after one of them (``meta["session"]``), before ``limit``.

**Question time** (``dataset.question_time``). The official simulator streams the show and asks each
question during its own session, with only what was said so far stored (``simulator.py``: the
history is saved utterance by utterance and the question is put after one of the session's chatbot
utterances); that is what makes the "not happened yet" types (``before_event_unans``, the ``fu``
temporal-KG types, ``dont_know_unans*``) answerable only with "I don't know". With
``question_time: session`` (the default and the paper setting) :func:`up_to_question_time` splits
each sample into one sample per session that has questions: its history holds the sessions up to
and including that session (the pickle has no asking position inside a session, so the whole
session is in view) and its id is ``<history id>@<session id>``. ``question_time: none`` keeps one
history for the whole show (every question sees every session: cheaper, but the unanswerable-yet
questions are then scored against a system that has seen the answer).

Cost: each prefix is its own history, so a memory system ingests sessions 1..t once per question
session t (the System contract builds a store per history id; prefixes are not shared). A show of
S question sessions costs about S/2 times one full ingestion; bound it with ``max_episodes``,
``sessions`` or ``per_episode``.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.data.errors import DataError
from ctxbench.data.invariants import answer_text, check_samples, nonblank
from ctxbench.data.locomo import check_sessions
from ctxbench.data.records import field, short_repr, short_text
from ctxbench.data.safe_pickle import safe_load
from ctxbench.data.samples import Samples
from ctxbench.data.sources import downloads_dir, locate

log = logging.getLogger(__name__)
OPTION_LETTERS = ("(A)", "(B)", "(C)", "(D)", "(E)")
UNKNOWN_ANSWER = "I don't know."
FORMATS = ("multi_choice", "open_ended")
QUESTION_TIMES = ("session", "none")
CREDIT = re.compile(r"^(Teleplay|Story|Written by|Directed by)\s*:", re.I)
SPEAKER = re.compile(r"^([^:\[\]()]{1,60}?):\s?(.*)$")
NARRATOR = "Narrator"


def script_turns(script: str, session_id: str, quirks: Counter) -> list[Turn]:
    """A DialSim script → turns ("Speaker: line"); continuation lines join the previous turn."""
    turns: list[Turn] = []
    for raw in script.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if CREDIT.match(line):
            quirks["credit_lines_skipped"] += 1
            continue
        m = SPEAKER.match(line)
        if m and not line.startswith(("[", "(")):
            turns.append(Turn(speaker=m.group(1).strip(), text=m.group(2).strip(),
                              id=f"{session_id}:{len(turns) + 1}"))
        elif line.startswith(("[", "(")) or not turns:
            quirks["narration_lines"] += 1
            turns.append(Turn(speaker=NARRATOR, text=line, id=f"{session_id}:{len(turns) + 1}"))
        else:
            quirks["continuation_lines"] += 1
            turns[-1].text += "\n" + line
    return turns


def _question(raw: Any, path: Path, rec: str, qid: str, qtype: str, level: str, session_id: str,
              fmt: str, quirks: Counter) -> Question | None:
    phrasings = field(raw, "questions", dict, path, rec)
    for k, v in phrasings.items():
        if not isinstance(v, str):
            raise DataError(path, f"expected a string, got {type(v).__name__}", record=rec,
                            field=f"questions[{short_repr(k)}]")
    if not phrasings:
        raise DataError(path, "no phrasing", record=rec, field="questions")
    text = nonblank(phrasings.get("default") or next(iter(phrasings.values())), path, rec, "questions")
    answer = field(raw, "answer", (str, int, float), path, rec)
    if not isinstance(answer, str):
        quirks["non_string_answers"] += 1
    answer = nonblank(answer_text(answer, path, rec, "answer"), path, rec, "answer")
    options = field(raw, "options", list, path, rec, default=None)
    if options is not None:
        for k, o in enumerate(options):
            if not isinstance(o, (str, int, float)):
                raise DataError(path, f"expected a string, got {type(o).__name__}", record=rec, field=f"options[{k}]")
        options = [answer_text(o, path, rec, f"options[{k}]") for k, o in enumerate(options)]
        if len(options) != len(OPTION_LETTERS):
            quirks["options_not_five"] += 1
    letter = None
    if options:
        letter = next((OPTION_LETTERS[i] for i, o in enumerate(options[:5]) if o.strip().lower() == answer.strip().lower()), None)
    meta = {"session": session_id, "level": level, "type": qtype, "phrasings": dict(phrasings), "answer_letter": letter}
    if fmt == "multi_choice":
        if letter is None:
            quirks["dropped_answer_not_in_options"] += 1
            return None
        gold, opts = answer, options
    else:
        gold = UNKNOWN_ANSWER if letter == "(E)" else answer
        opts = None
        meta["options"] = options
    return Question(id=qid, question=text, answer=gold, category=qtype, category_name=qtype,
                    options=opts, meta=meta)


def _bucket_items(bucket: Any, path: Path, rec: str) -> list[tuple[str, Any]]:
    if isinstance(bucket, list):
        return [(str(i), q) for i, q in enumerate(bucket)]
    if isinstance(bucket, dict):
        return [(str(k), q) for k, q in bucket.items()]
    raise DataError(path, f"expected a list or an object of questions, got {type(bucket).__name__}", record=rec)


def load_dialsim_file(path: Path, fmt: str = "multi_choice", per_episode: bool = False,
                      episodes: list[str] | None = None, max_episodes: int | None = None,
                      question_types: list[str] | None = None, levels: list[str] | None = None) -> Samples:
    if fmt not in FORMATS:
        raise DataError(path, f"unknown answer format {fmt!r} (choose {', '.join(FORMATS)})", field="dataset.answer_format")
    data = safe_load(path)
    if not isinstance(data, dict):
        raise DataError(path, f"expected a dict of episodes, got {type(data).__name__}")
    show = path.stem.replace("_dialsim", "")
    names = [str(e) for e in data]
    if episodes:
        missing = [e for e in episodes if str(e) not in names]
        if missing:
            raise DataError(path, f"unknown episode(s) {missing}; first episodes: {[short_text(n) for n in names[:5]]}",
                            field="dataset.episodes")
        keep = {str(e) for e in episodes}
    else:
        keep = set(names[: max_episodes or None])
    types = set(question_types or [])
    quirks: Counter = Counter(credit_lines_skipped=0, narration_lines=0, continuation_lines=0, non_string_answers=0,
                              options_not_five=0, dropped_answer_not_in_options=0, sessions_without_questions=0)
    groups: list[tuple[str, list[Session], list[Question]]] = []
    for epi, epi_data in data.items():
        if str(epi) not in keep:
            continue
        if not isinstance(epi_data, dict):
            raise DataError(path, f"expected a dict of sessions, got {type(epi_data).__name__}",
                            record=f"episode {short_text(epi)}")
        sessions: list[Session] = []
        questions: list[Question] = []
        for sc, sess in epi_data.items():
            rec = f"episode {short_text(epi)} session {short_text(sc)}"
            sid = f"{epi}/{sc}"
            script = nonblank(field(sess, "script", str, path, rec), path, rec, "script")
            date = field(sess, "date", str, path, rec, default="")
            sessions.append(Session(id=sid, turns=script_turns(script, sid, quirks), date=date))
            n_before = len(questions)
            for level, key in (("hard", "hard_q"), ("easy", "easy_q")):
                if levels and level not in levels:
                    continue
                buckets = field(sess, key, dict, path, rec, default={})
                for qtype, bucket in buckets.items():
                    if types and qtype not in types:
                        continue
                    for qid, q in _bucket_items(bucket, path, f"{rec} {key}[{short_repr(qtype)}]"):
                        qrec = f"{rec} {key}[{short_repr(qtype)}][{short_text(qid)}]"
                        made = _question(q, path, qrec, f"{show}-{sid}-{level}-{qtype}-{qid}", str(qtype), level, sid,
                                         fmt, quirks)
                        if made is not None:
                            questions.append(made)
            if len(questions) == n_before:
                quirks["sessions_without_questions"] += 1
        groups.append((str(epi), sessions, questions))
    if per_episode:
        samples = [Sample(History(id=f"{show}-{epi}", sessions=s), q) for epi, s, q in groups]
    else:
        samples = [Sample(History(id=show, sessions=[x for _, s, _ in groups for x in s]),
                          [x for _, _, q in groups for x in q])]
    check_samples(samples, path, conversational=True, questions="any")
    return Samples(samples, source=str(path), quirks=quirks)


def first_sessions(sample: Sample, n: int) -> Sample:
    """The sample cut to its first ``n`` sessions, with only the questions asked after one of them."""
    kept = sample.history.sessions[:n]
    ids = {s.id for s in kept}
    return Sample(replace(sample.history, sessions=kept), [q for q in sample.questions if q.meta.get("session") in ids])


def cut_sessions(samples: Samples, sessions: object) -> Samples:
    """``dataset.sessions`` applied to every sample (None = unchanged), logging what was kept."""
    n = check_sessions(sessions, samples.source)
    if n is None:
        return samples
    out = []
    for s in samples:
        cut = first_sessions(s, n)
        log.info("dataset.sessions=%d: %s %d/%d sessions, %d/%d questions", n, s.history.id,
                 len(cut.history.sessions), len(s.history.sessions), len(cut.questions), len(s.questions))
        out.append(cut)
    return samples.derive(out)


def up_to_question_time(samples: Samples) -> Samples:
    """One sample per session with questions: the history up to and including that session, and the
    questions asked in it (in dataset order), id ``<history id>@<session id>``."""
    out = []
    for s in samples:
        at = {x.id: i for i, x in enumerate(s.history.sessions)}
        groups: dict[int, list[Question]] = {}
        for q in s.questions:
            groups.setdefault(at[q.meta["session"]], []).append(q)
        for i in sorted(groups):
            sessions = s.history.sessions[: i + 1]
            out.append(Sample(replace(s.history, id=f"{s.history.id}@{sessions[-1].id}", sessions=sessions), groups[i]))
    return samples.derive(out)


@register("dataset", "dialsim", aliases=("dialsim_sample",))
def load_dialsim(cfg: Any) -> Samples:
    raw = cfg.path or str(downloads_dir() / "dialsim" / f"{cfg.show}_dialsim.pickle")
    path = locate(raw, "dialsim")
    when = cfg.question_time
    if when not in QUESTION_TIMES:
        raise DataError(path, f"unknown question_time {when!r} (choose {', '.join(QUESTION_TIMES)})",
                        field="dataset.question_time")
    samples = load_dialsim_file(
        path, fmt=cfg.answer_format, per_episode=cfg.per_episode,
        episodes=list(cfg.episodes or []) or None, max_episodes=cfg.max_episodes,
        question_types=list(cfg.question_types or []) or None, levels=list(cfg.levels or []) or None)
    samples.log_quirks("dialsim")
    samples = cut_sessions(samples, cfg.sessions)
    limit = cfg.limit
    if limit:
        samples = samples.derive(Sample(s.history, s.questions[: int(limit)]) for s in samples)
    if when == "session":
        samples = up_to_question_time(samples)
    return samples
