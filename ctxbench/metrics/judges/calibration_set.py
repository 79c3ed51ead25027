"""The judge calibration set: answers of known correctness, built from a dataset's gold without an LLM.

For ``questions`` questions sampled from categories 1-4 (seeded, the same number from each category so
temporal questions, the ones with dates, are not rare; adversarial questions are not judged: J leaves
them out), each question gives up to five
items, each drawn from its own ``random.Random(f"{seed}:{question id}")`` so a question's items do not
depend on which others were sampled:

- ``paraphrase`` (should be accepted): the gold reworded — its date in another layout (``7 May 2023`` →
  ``May 7, 2023``), else a leading article dropped, else the first letter's case flipped — inside an
  extra context sentence that adds no fact;
- ``wrong_date`` (reject; only when the gold has a date): the gold with its date shifted by whole weeks,
  months or years (:mod:`.gold_dates`);
- ``wrong_entity`` (reject): the gold with a speaker's name swapped for the other speaker's, else
  another gold answer of the same conversation that shares no content word with it, of the same shape
  (a date for a date, a number for a number) when there is one;
- ``vague`` (reject): a topical non-answer made of the question's own content words ("Something to do
  with Ava's half marathon."); left out when those words hold a word of the gold;
- ``hedge`` (reject): the gold offered beside a wrong option with doubt ("I'm not sure, maybe X or maybe
  Y."), the wrong option being the shifted date, else the swapped entity; left out when there is neither.

Each item: ``id`` (``<question id>~<kind>``), ``question_id``, ``history``, ``category``,
``category_name``, ``question``, ``gold``, ``answer``, ``kind``, ``expect`` (accept | reject).
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

from ctxbench.core.types import Question, Sample
from ctxbench.metrics.base import answer_text, category_name
from ctxbench.metrics.judges import gold_dates

KINDS = ("paraphrase", "wrong_date", "wrong_entity", "vague", "hedge")
EXPECT = {"paraphrase": "accept", "wrong_date": "reject", "wrong_entity": "reject", "vague": "reject",
          "hedge": "reject"}

STOPWORDS = frozenset("""a an the and or but of to in on at for with by from about as into than then that this these
those is are was were be been being do does did has have had will would could should can may might must shall
what when where which who whom whose why how did does it its it's he she they them their his her him you your i
me my we our us not no yes if so any some there here s""".split())
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’]*")

CONTEXT = ("{p}. That is what came up when they talked about it.",
           "From what was said in the conversation: {p}.",
           "{p}, as mentioned in one of their chats.")
VAGUE = ("Something to do with {w}.", "It was about {w}.", "Something related to {w}.")
HEDGE = ("I'm not sure, maybe {gold} or maybe {other}.", "It could be {other} or {gold}, I can't say for certain.",
         "Possibly {gold}, though it might have been {other}; I don't really remember.")


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` that are not stop words (possessive 's dropped)."""
    out = []
    for w in _WORD.findall(text.replace("’", "'")):
        w = w.lower()
        w = w[:-2] if w.endswith("'s") else w
        if w and w not in STOPWORDS:
            out.append(w)
    return out


def _phrase(text: str) -> str:
    return text.strip().rstrip(".").strip()


def paraphrase(gold: str, rng: random.Random) -> str:
    """The gold reworded without changing its fact (see the module docstring)."""
    text = _phrase(gold)
    d = gold_dates.find_date(text)
    if d is not None:
        text = gold_dates.reformat(text, d)
    elif re.match(r"(?i)(a|an|the)\s+\S", text):
        text = re.sub(r"(?i)^(a|an|the)\s+", "", text, count=1)
    elif text[:1].isalpha():
        text = (text[0].lower() if text[0].isupper() else text[0].upper()) + text[1:]
    return rng.choice(CONTEXT).format(p=text)


def wrong_date(gold: str, rng: random.Random) -> str | None:
    text = _phrase(gold)
    d = gold_dates.find_date(text)
    if d is None:
        return None
    return gold_dates.replace(text, d, gold_dates.write(gold_dates.shift(d, rng)))


NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten eleven twelve once twice".split())


def shape(text: str) -> str:
    """``date`` (has a date), ``number`` (starts with a number), else ``text``: swaps keep the shape."""
    if gold_dates.find_date(text) is not None:
        return "date"
    first = (content_words(text) or [""])[0]
    return "number" if first[:1].isdigit() or first in NUMBER_WORDS else "text"


def wrong_entity(gold: str, speakers: list[str], others: list[str], rng: random.Random,
                 alike: list[str] | None = None) -> str | None:
    """A speaker swapped for the other, else another gold of the conversation (``others``; from
    ``alike``, the golds of its category, first) with no shared content word, of the same shape
    (:func:`shape`) when the conversation has one."""
    text = _phrase(gold)
    for name in speakers:
        if re.search(rf"\b{re.escape(name)}\b", text):
            rest = [s for s in speakers if s != name]
            if rest:
                return re.sub(rf"\b{re.escape(name)}\b", rest[0], text)
    mine = set(content_words(text))

    def usable(pool: list[str]) -> list[str]:
        return sorted({_phrase(o) for o in pool if _phrase(o) and len(o.split()) <= 12
                       and not (set(content_words(o)) & mine) and _phrase(o).lower() != text.lower()})

    for pool in (usable(alike or []), usable(others)):
        same = [o for o in pool if shape(o) == shape(text)]
        if same:
            return rng.choice(same)
    pool = usable(others)
    return rng.choice(pool) if pool else None


def vague(question: str, gold: str, rng: random.Random) -> str | None:
    """A topical non-answer of the question's content words, unless they hold a word of the gold."""
    words = [w for w in _WORD.findall(question.replace("’", "'")) if w.lower() not in STOPWORDS
             and not (w.lower().endswith("'s") and w.lower()[:-2] in STOPWORDS)]
    if not words or set(content_words(" ".join(words))) & set(content_words(gold)):
        return None
    return rng.choice(VAGUE).format(w=" ".join(words))


def hedge(gold: str, other: str | None, rng: random.Random) -> str | None:
    if not other:
        return None
    return rng.choice(HEDGE).format(gold=_phrase(gold), other=other)


def question_items(sample: Sample, q: Question, seed: int) -> list[dict[str, Any]]:
    """The items of one question, in :data:`KINDS` order (kinds that do not apply left out)."""
    rng = random.Random(f"{seed}:{q.id}")
    gold = answer_text(q.answer)
    others = [answer_text(o.answer) for o in sample.questions
              if o.id != q.id and category_name(o) != "adversarial" and answer_text(o.answer).strip()]
    alike = [answer_text(o.answer) for o in sample.questions
             if o.id != q.id and category_name(o) == category_name(q) and answer_text(o.answer).strip()]
    speakers = list(sample.history.speakers)
    date_wrong = wrong_date(gold, rng)
    entity_wrong = wrong_entity(gold, speakers, others, rng, alike)
    answers = {"paraphrase": paraphrase(gold, rng), "wrong_date": date_wrong, "wrong_entity": entity_wrong,
               "vague": vague(q.question, gold, rng), "hedge": hedge(gold, date_wrong or entity_wrong, rng)}
    base = {"question_id": q.id, "history": sample.history.id, "category": q.category,
            "category_name": category_name(q), "question": q.question, "gold": gold}
    return [{"id": f"{q.id}~{kind}", **base, "answer": answers[kind], "kind": kind, "expect": EXPECT[kind]}
            for kind in KINDS if answers[kind]]


def build_calibration_set(samples: list[Sample], questions: int, seed: int = 0) -> list[dict[str, Any]]:
    """The items of ``questions`` questions drawn with ``seed``: the same number from each category
    (round robin over the categories in id order, the remainder to the first; all of a category when
    it has fewer), each category's questions sampled with ``random.Random(f"{seed}:{category}")``."""
    by_cat: dict[str, list[tuple[Sample, Question]]] = {}
    for s in samples:
        for q in s.questions:
            if category_name(q) != "adversarial" and answer_text(q.answer).strip():
                by_cat.setdefault(category_name(q), []).append((s, q))
    cats = sorted(by_cat, key=lambda c: str(by_cat[c][0][1].category).zfill(4))
    want = {c: 0 for c in cats}
    left = int(questions)
    while left > 0 and any(want[c] < len(by_cat[c]) for c in cats):
        for c in cats:
            if left > 0 and want[c] < len(by_cat[c]):
                want[c] += 1
                left -= 1
    picked = []
    for c in cats:
        idx = sorted(random.Random(f"{seed}:{c}").sample(range(len(by_cat[c])), want[c]))
        picked += [by_cat[c][i] for i in idx]
    return [item for s, q in picked for item in question_items(s, q, seed)]


def set_hash(items: list[dict[str, Any]]) -> str:
    """SHA-256 of the items (the same seed and data give the same hash)."""
    return hashlib.sha256(json.dumps(items, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def item_records(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items as prediction records (``prediction`` = the item's answer), for the judge metrics."""
    return [{"id": it["id"], "question": it["question"], "prediction": it["answer"], "answer": it["gold"],
             "category": it["category"], "category_name": it["category_name"]} for it in items]
