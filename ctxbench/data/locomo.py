"""LoCoMo (``locomo10.json``): sessions of turns per conversation, QA with category ids and names.

Quirks of the official file, each handled and counted in ``Samples.quirks`` (never dropped):

- category-5 (adversarial) items carry only ``adversarial_answer`` (444 of 446): the gold answer is
  the correct option of LoCoMo's two-option prompt, "Not mentioned in the conversation"; the
  distractor is kept in ``Question.adversarial_answer``; an ``answer`` a few of them also have
  is kept in ``meta["raw_answer"]``;
- integer answers (``2022``) become strings (NaN/Infinity are refused, never the gold "nan");
- malformed evidence ids ("D8:6; D9:17", "D", "D:11:26") are kept raw and counted;
- sessions come from the ``session_N`` keys, not the date keys (conv-26 has 35 dates, 19 sessions);
- image turns: the BLIP caption is appended to the text the system sees,
  ``... [shares a photo: <caption>]`` (raw text and image fields kept in ``Turn.meta``).

Subsetting: ``dataset.conversations=[conv-26]``, ``dataset.sessions=N``, ``dataset.categories=[1,temporal]``,
``dataset.limit=N`` (first N questions per conversation after the other filters), applied in that order.
``dataset.errata=FILE``: a published errata file of gold answers (:mod:`ctxbench.data.errata`), resolved
against the whole file before subsetting; every run is then scored under the original and the
corrected gold. The full file's category counts are checked (:func:`check_category_counts`).

``dataset.sessions=N`` cuts each conversation to its sessions 1..N (numbered by the ``session_N`` key;
turns untouched) and keeps only the questions whose evidence lies there: every evidence id parsed by
:func:`parse_evidence_id` names a session <= N. A question with no parsable evidence id (4 in
locomo10.json) cannot be placed and is dropped (counted in the log line); a conversation with no session
beyond N is kept whole, every question included. Every system then sees the same cut history.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.data.categories import (ADVERSARIAL_GOLD, LOCOMO10_IDS, LOCOMO_CATEGORIES, category_fit, category_name,
                                      parse_categories)
from ctxbench.data.errors import DataError
from ctxbench.data.invariants import answer_text, check_samples, nonblank
from ctxbench.data.records import field, read_json, short_repr, short_text
from ctxbench.data.samples import Samples, keep_histories
from ctxbench.data.sources import locate

SESSION_KEY = re.compile(r"session_(\d+)$")
DATE_KEY = re.compile(r"session_(\d+)_date_time$")
EVIDENCE_ID = re.compile(r"D(\d+):(\d+)$")
EVIDENCE_LOOSE = re.compile(r"D:?(\d+):(\d+)")
log = logging.getLogger(__name__)
QUIRKS = ("adversarial_answer_only", "adversarial_with_answer", "non_string_answers", "malformed_evidence",
          "date_keys_without_session", "sessions_without_date", "image_turns", "empty_sessions",
          "adversarial_without_distractor", "turns_without_dia_id", "duplicate_questions")


def image_text(text: str, caption: str) -> str:
    """The turn text a system sees for an image turn."""
    return f"{text} [shares a photo: {caption}]" if text else f"[shares a photo: {caption}]"


def parse_evidence_id(raw: str) -> list[tuple[int, int]]:
    """(session, turn) pairs in an evidence string; lenient for malformed ones ("D8:6; D9:17" → two,
    "D:11:26" → (11, 26), "D" → none)."""
    m = EVIDENCE_ID.fullmatch(raw.strip())
    if m:
        return [(int(m.group(1)), int(m.group(2)))]
    return [(int(a), int(b)) for a, b in EVIDENCE_LOOSE.findall(raw)]


def _turn(raw: Any, path: Path, rec: str, quirks: Counter) -> Turn:
    speaker = field(raw, "speaker", str, path, rec)
    text = field(raw, "text", str, path, rec)
    dia_id = field(raw, "dia_id", str, path, rec, default="")
    if not dia_id:
        quirks["turns_without_dia_id"] += 1
    caption = field(raw, "blip_caption", str, path, rec, default=None)
    meta: dict[str, Any] = {}
    if caption is not None:
        quirks["image_turns"] += 1
        meta = {"raw_text": text, "blip_caption": caption}
        for k in ("img_url", "query"):
            if k in raw:
                meta[k] = raw[k]
        text = image_text(text, caption)
    return Turn(speaker=speaker, text=text, id=dia_id, meta=meta)


def _question(raw: Any, path: Path, sample_id: str, j: int, quirks: Counter) -> Question:
    rec = f"{short_text(sample_id, 60)} qa[{j}]"
    text = nonblank(field(raw, "question", str, path, rec), path, rec, "question")
    cat = field(raw, "category", int, path, rec)
    if cat not in (1, 2, 3, 4, 5):
        raise DataError(path, f"category must be 1-5, got {cat}", record=rec, field="category")
    evidence = field(raw, "evidence", list, path, rec, default=[])
    for k, e in enumerate(evidence):
        if not isinstance(e, str):
            raise DataError(path, f"expected a string, got {type(e).__name__}", record=rec, field=f"evidence[{k}]")
        if not EVIDENCE_ID.fullmatch(e.strip()):
            quirks["malformed_evidence"] += 1
    answer = field(raw, "answer", (str, int, float), path, rec, default=None)
    if answer is not None and not isinstance(answer, str):
        quirks["non_string_answers"] += 1
    if answer is not None:
        answer = answer_text(answer, path, rec, "answer")
    meta: dict[str, Any] = {"conversation": sample_id, "index": j}
    adversarial = None
    if cat == 5:
        adversarial = field(raw, "adversarial_answer", (str, int, float), path, rec, default=None)
        if adversarial is None:
            quirks["adversarial_without_distractor"] += 1
        else:
            adversarial = answer_text(adversarial, path, rec, "adversarial_answer")
        if answer is None:
            quirks["adversarial_answer_only"] += 1
        else:
            quirks["adversarial_with_answer"] += 1
            meta["raw_answer"] = answer
        answer = ADVERSARIAL_GOLD
    elif answer is None:
        raise DataError(path, "missing required field (only category-5 items may omit it)", record=rec, field="answer")
    else:
        nonblank(answer, path, rec, "answer")
    return Question(id=f"{sample_id}-q{j}", question=text, answer=answer, category=cat,
                    category_name=category_name(cat), evidence=list(evidence),
                    adversarial_answer=adversarial, meta=meta)


def _conversation(rec: Any, path: Path, i: int, quirks: Counter) -> Sample:
    sample_id = field(rec, "sample_id", str, path, f"index {i}")
    if not sample_id.strip():
        raise DataError(path, f"is empty ({short_repr(sample_id)}); a non-empty string is required", record=f"index {i}",
                        field="sample_id")
    label = short_text(sample_id, 60)  # file text in an error message: one line, bounded
    conv = field(rec, "conversation", dict, path, label)
    speakers = [nonblank(field(conv, k, str, path, label, prefix="conversation."), path, label, f"conversation.{k}")
                for k in ("speaker_a", "speaker_b")]
    nums = sorted(int(m.group(1)) for k in conv if (m := SESSION_KEY.fullmatch(k)))
    dates = {int(m.group(1)) for k in conv if (m := DATE_KEY.fullmatch(k))}
    quirks["date_keys_without_session"] += len(dates - set(nums))
    sessions = []
    for n in nums:
        key = f"session_{n}"
        turns_raw = field(conv, key, list, path, label, prefix="conversation.")
        if not turns_raw:
            quirks["empty_sessions"] += 1
        turns = [_turn(t, path, f"{label} {key}[{k}]", quirks) for k, t in enumerate(turns_raw)]
        for k, t in enumerate(turns):
            if t.speaker not in speakers:
                raise DataError(path, f"speaker {short_repr(t.speaker)} is neither speaker_a {short_repr(speakers[0])}"
                                      f" nor speaker_b {short_repr(speakers[1])}", record=f"{label} {key}[{k}]",
                                field="speaker")
        date = field(conv, f"{key}_date_time", str, path, label, default="", prefix="conversation.")
        if not date:
            quirks["sessions_without_date"] += 1
        sessions.append(Session(id=key, turns=turns, date=date))
    qa = field(rec, "qa", list, path, label)
    questions = [_question(q, path, sample_id, j, quirks) for j, q in enumerate(qa)]
    # the same question text asked twice (12 in locomo10.json): kept, each under its own id
    quirks["duplicate_questions"] += len(questions) - len({q.question for q in questions})
    return Sample(History(id=sample_id, sessions=sessions, speakers=speakers), questions)


def load_locomo_file(path: Path) -> Samples:
    """Every conversation of a LoCoMo-format file, with quirk counts."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, f"expected a JSON list of conversations, got {type(data).__name__}")
    quirks: Counter = Counter({k: 0 for k in QUIRKS})
    samples = [_conversation(rec, path, i, quirks) for i, rec in enumerate(data)]
    seen: set[str] = set()
    for s in samples:
        if s.history.id in seen:
            raise DataError(path, "duplicate sample_id", record=short_text(s.history.id, 60), field="sample_id")
        seen.add(s.history.id)
    check_samples(samples, path, conversational=True, categories=LOCOMO_CATEGORIES, questions="each")
    check_category_counts(samples, path)
    return Samples(samples, source=str(path), quirks=quirks)


def check_category_counts(samples: list[Sample], path: object) -> str | None:
    """The full LoCoMo (its ten conversation ids) must have LoCoMo's questions per category id
    (:func:`ctxbench.data.categories.category_fit`); a copy whose ids do not fit (relabelled, cut) is
    warned about in one line, returned too. Any other file (a subset, the shipped sample) is not checked."""
    if sorted(s.history.id for s in samples) != sorted(LOCOMO10_IDS):
        return None
    fit = category_fit(Counter(q.category for s in samples for q in s.questions))
    if fit.fits:
        return None
    line = f"{path}: the ten LoCoMo conversations, but {fit.line}; per-category numbers are named by id"
    log.warning(line)
    return line


def session_number(session: Session, source: str, conversation: str) -> int:
    """A LoCoMo session's number: ``session_5`` → 5 (the loader names every session so)."""
    m = SESSION_KEY.fullmatch(session.id)
    if m is None:
        raise DataError(source, f"session id {short_repr(session.id)} is not session_<N>, so dataset.sessions "
                                "cannot number it", record=short_text(conversation, 60))
    return int(m.group(1))


def check_sessions(sessions: object, source: str) -> int | None:
    """``dataset.sessions`` as an int >= 1, or None (= every session)."""
    if sessions is None:
        return None
    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise DataError(source, f"must be an integer >= 1 (null = all sessions), got {sessions!r}",
                        field="dataset.sessions")
    return sessions


def first_sessions(sample: Sample, n: int, source: str = "") -> tuple[Sample, int]:
    """The conversation cut to sessions 1..n with the questions whose evidence lies in them, and the
    number of questions dropped for having no parsable evidence id. No session beyond n: kept whole."""
    kept = [s for s in sample.history.sessions if session_number(s, source, sample.history.id) <= n]
    if len(kept) == len(sample.history.sessions):
        return sample, 0
    questions, no_evidence = [], 0
    for q in sample.questions:
        where = {sess for e in q.evidence for sess, _ in parse_evidence_id(e)}
        if not where:
            no_evidence += 1
        elif max(where) <= n:
            questions.append(q)
    return Sample(replace(sample.history, sessions=kept), questions), no_evidence


def cut_sessions(samples: list[Sample], n: int, source: str = "") -> list[Sample]:
    """:func:`first_sessions` for each conversation, logging what was kept."""
    out = []
    for s in samples:
        cut, no_evidence = first_sessions(s, n, source)
        log.info("dataset.sessions=%d: %s %d/%d sessions, %d/%d questions%s", n, s.history.id,
                 len(cut.history.sessions), len(s.history.sessions), len(cut.questions), len(s.questions),
                 f" ({no_evidence} without a parsable evidence id dropped)" if no_evidence else "")
        out.append(cut)
    return out


def select(samples: Samples, conversations: Iterable[str] | None = None,
           categories: Iterable[object] | None = None, limit: int | None = None,
           sessions: int | None = None) -> Samples:
    """Subset by conversation id, first sessions, category (ids or names) and questions per conversation."""
    if isinstance(conversations, str):
        conversations = [conversations]
    n_sessions = check_sessions(sessions, samples.source)
    out = list(samples)
    if conversations:
        out = keep_histories(out, conversations, samples.source, "dataset.conversations", "conversation(s)")
    if n_sessions is not None:
        out = cut_sessions(out, n_sessions, samples.source)
    cats = parse_categories(categories)
    if cats is not None or limit:
        if limit is not None and int(limit) < 0:
            raise DataError(samples.source, f"must be >= 0, got {limit}", field="dataset.limit")
        out = [Sample(s.history, [q for q in s.questions if cats is None or q.category in cats][: limit or None])
               for s in out]
    return samples.derive(out)


def stats(samples: Samples) -> dict[str, Any]:
    """Per-category counts and quirk counts (the README table)."""
    from ctxbench.data.stats import dataset_stats

    return dataset_stats(samples)


@register("dataset", "locomo", aliases=("locomo_sample",))
def load_locomo(cfg: Any) -> Samples:
    path = locate(cfg.path, "locomo")
    samples = load_locomo_file(path)
    samples.log_quirks("locomo")
    if cfg.errata:  # resolved against the whole file (locomo-audit's ids count its conversations)
        from ctxbench.data.errata import load_errata, mismatch_line

        samples.errata = load_errata(cfg.errata, samples)
        if mismatch_line(samples.errata):
            log.warning(mismatch_line(samples.errata))
    return select(samples, cfg.conversations, cfg.categories, cfg.limit, cfg.sessions)
