"""``dataset=locomo_pwc``: LoCoMo sessions as PwC-style rows (context → prompt → answer).

Each LoCoMo session becomes ``Sample(History(text=<rendered session>), [questions])`` holding the
questions whose evidence lies entirely in that session (questions with evidence in several sessions,
or none that parses, are left out and counted). Split by conversation, so a fine-tune on
``split=train`` never sees a test conversation: ``dataset.test_conversations`` (default conv-26,
conv-30) form ``split=test``, the other eight ``split=train``; ``split=all`` keeps every one.
``per_question=true`` gives one sample per question (exactly the PwC row shape).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from ctxbench.core.registry import register
from ctxbench.core.render import render_session
from ctxbench.core.types import History, Sample
from ctxbench.data.categories import LOCOMO_CATEGORIES, parse_categories
from ctxbench.data.errors import DataError
from ctxbench.data.invariants import check_samples
from ctxbench.data.locomo import load_locomo_file, parse_evidence_id
from ctxbench.data.samples import Samples
from ctxbench.data.sources import locate

DEFAULT_TEST = ("conv-26", "conv-30")
SPLITS = ("train", "test", "all")


def session_number(session_id: str) -> int:
    return int(session_id.rsplit("_", 1)[-1])


def evidence_sessions(evidence: list[str]) -> set[int]:
    return {s for e in evidence for s, _ in parse_evidence_id(e)}


def split_conversations(samples: Samples, split: str, test_ids: list[str]) -> list[Sample]:
    if split not in SPLITS:
        raise DataError(samples.source, f"unknown split {split!r} (choose {', '.join(SPLITS)})", field="dataset.split")
    have = [s.history.id for s in samples]
    missing = [c for c in test_ids if c not in have]
    if missing:
        raise DataError(samples.source, f"unknown conversation(s) {missing}; available: {have}",
                        field="dataset.test_conversations")
    if split == "all":
        return list(samples)
    test = set(test_ids)
    return [s for s in samples if (s.history.id in test) == (split == "test")]


def session_rows(conv: Sample, cats: set[int] | None, with_dates: bool, quirks: Counter) -> list[Sample]:
    by_session: dict[int, list] = {}
    for q in conv.questions:
        if cats is not None and q.category not in cats:
            continue
        sess = evidence_sessions(q.evidence)
        if not sess:
            quirks["questions_without_evidence"] += 1
        elif len(sess) > 1:
            quirks["questions_multi_session_evidence"] += 1
        else:
            by_session.setdefault(next(iter(sess)), []).append(q)
    rows = []
    known = {session_number(s.id) for s in conv.history.sessions}
    quirks["questions_evidence_in_missing_session"] += sum(len(v) for k, v in by_session.items() if k not in known)
    for s in conv.history.sessions:
        qs = by_session.get(session_number(s.id), [])
        if not qs:
            quirks["sessions_without_questions"] += 1
            continue
        hid = f"{conv.history.id}-{s.id}"
        text = render_session(s, with_dates)
        qs = [replace(q, meta={**q.meta, "session": s.id}) for q in qs]
        rows.append(Sample(History(id=hid, text=text, speakers=list(conv.history.speakers)), qs))
        quirks["questions_kept"] += len(qs)
    return rows


@register("dataset", "locomo_pwc")
def load_locomo_pwc(cfg: Any) -> Samples:
    path = locate(cfg.path, "locomo")
    convs = load_locomo_file(path)
    test_ids = [str(c) for c in (cfg.test_conversations or DEFAULT_TEST)]
    chosen = split_conversations(convs, cfg.split, test_ids)
    cats = parse_categories(cfg.categories)
    quirks: Counter = Counter(questions_kept=0, questions_without_evidence=0, questions_multi_session_evidence=0,
                              questions_evidence_in_missing_session=0, sessions_without_questions=0)
    rows: list[Sample] = []
    for conv in chosen:
        rows.extend(session_rows(conv, cats, cfg.with_dates, quirks))
    if cfg.per_question:
        rows = [Sample(History(id=q.id, text=r.history.text, speakers=r.history.speakers), [q])
                for r in rows for q in r.questions]
    if cfg.limit:
        rows = rows[: cfg.limit]
    check_samples(rows, path, conversational=False, categories=LOCOMO_CATEGORIES, questions="each")
    out = Samples(rows, source=str(path), quirks=quirks)
    out.log_quirks("locomo_pwc")
    return out
