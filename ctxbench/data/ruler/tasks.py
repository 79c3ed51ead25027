"""One generator per RULER task family: niah, vt (variable tracking), cwe and fwe (common / frequent words).

Each family function draws everything random once from the example's own ``random.Random`` (keys,
values, depths, the essay start, the word choice) and returns a function of the haystack size ``n``
that renders the example (:class:`Example`): a pure function, so :func:`.haystack.fit` can try sizes
and the example a seed makes never depends on how many sizes were tried. What differs from RULER's
generators is said where it happens; the texts are RULER's (:mod:`.templates`).
"""
from __future__ import annotations

import math
import random
import string
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional

from ctxbench.data.ruler import haystack as H
from ctxbench.data.ruler import templates as T
from ctxbench.data.ruler.words import key_words, plain_words


@dataclass(frozen=True)
class Example:
    """One rendered example: the history text, the question, the reply prefix and the expected strings."""

    context: str  # instruction + haystack (+ few-shot example): everything before the question
    question: str
    answer_prefix: str  # RULER's, with its leading space
    outputs: list[str]
    depths: list[float] = field(default_factory=list)  # where the needles / chain statements sit (0..1)

    def input_text(self) -> str:
        """RULER's whole input: context, question, answer prefix (what ``dataset.length`` counts)."""
        return f"{self.context}\n{self.question}{self.answer_prefix}"


Render = Callable[[int], Example]
# (render, the largest haystack size it can make: None = unbounded)
Renderer = tuple[Render, Optional[int]]


# ---- random values (niah.py generate_random_*) -----------------------------------------------------
def draw(kind: str, rng: random.Random) -> str:
    """A needle key or value: a 7-digit number, an adjective-noun word, or a uuid4 (from ``rng``)."""
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "words":
        words = _keys()
        return words[rng.randrange(len(words))]  # an adjective-noun key
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"unknown needle kind {kind!r}")


@lru_cache(maxsize=1)
def _keys() -> tuple[str, ...]:
    return tuple(key_words())


def draw_distinct(kind: str, rng: random.Random, n: int, avoid: set[str] = frozenset()) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = draw(kind, rng)
        if v not in avoid and v not in out:
            out.append(v)
    return out


def depths(rng: random.Random, n: int) -> list[float]:
    """``n`` distinct depths from RULER's 40-point grid, ascending (RULER's essay haystacks only)."""
    return sorted(rng.sample(H.DEPTHS, n))


def slotted(units: list[str], items: list[str], seed: int) -> tuple[list[str], list[float]]:
    """``items`` put in a noise or needle haystack as RULER does (:func:`.haystack.uniform_slots`)."""
    return H.insert_before(units, items, H.uniform_slots(len(units), len(items), seed))


# ---- needle in a haystack ----------------------------------------------------------------------------
def niah(spec: T.Spec, rng: random.Random) -> Renderer:
    """RULER's niah.py: ``keys`` needles' keys, ``values`` values each, ``queries`` keys asked for."""
    n_keys = max(spec.keys, spec.queries)
    keys = draw_distinct(spec.key, rng, n_keys)
    values = [draw_distinct(spec.value, rng, spec.values) for _ in keys]
    kind = spec.value
    needles = [T.NEEDLE.format(kind=kind, key=k, value=v) for k, vs in zip(keys, values) for v in vs]
    rng.shuffle(needles)
    essay = spec.haystack == "essay"
    # essay: RULER's depth grid; noise / needle: uniform line slots drawn per size from this seed
    at, slot_seed = (depths(rng, len(needles)), 0) if essay else ([], rng.getrandbits(64))
    asked = sorted(rng.sample(range(n_keys), spec.queries))
    queries = [keys[i] for i in asked]
    outputs = [v for i in asked for v in values[i]]
    query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]
    if spec.queries * spec.values == 1:  # RULER's singular wording for one expected value
        kind, head, ask, prefix = kind[:-1], T.NIAH_INSTRUCTION_ONE, T.NIAH_QUESTION_ONE, T.NIAH_PREFIX_ONE
    else:
        head, ask, prefix = T.NIAH_INSTRUCTION, T.NIAH_QUESTION, T.NIAH_PREFIX
    instruction = head.format(kind=kind)
    question, answer_prefix = ask.format(kind=kind, query=query), prefix.format(kind=kind, query=query)
    start = rng.choice(H.sentence_starts())
    distractors = _Distractors(spec, set(keys), random.Random(rng.getrandbits(64)))

    def render(n: int) -> Example:
        if essay:
            body, where = " ".join(H.insert_at_depths(H.essay_units(start, n), needles, at)), at
        else:
            units = H.noise_units(n) if spec.haystack == "noise" else distractors.first(n)
            lines, where = slotted(units, needles, slot_seed)
            body = "\n".join(lines)
        return Example(f"{instruction}\n{body}", question, answer_prefix, outputs, where)

    return render, None


class _Distractors:
    """The needle haystack: needles with keys other than the real ones, drawn on demand from one RNG
    (the first ``n`` are the same whatever ``n`` is asked first)."""

    def __init__(self, spec: T.Spec, avoid: set[str], rng: random.Random):
        self.spec, self.avoid, self.rng, self.made = spec, avoid, rng, []

    def first(self, n: int) -> list[str]:
        while len(self.made) < n:
            key = draw_distinct(self.spec.key, self.rng, 1, self.avoid)[0]
            self.made.append(T.NEEDLE.format(kind=self.spec.value, key=key, value=draw(self.spec.value, self.rng)))
        return self.made[:n]


# ---- variable tracking -------------------------------------------------------------------------------
HOPS = 4  # synthetic.yaml vt: num_chains 1, num_hops 4


def _chain(rng: random.Random, letters: int) -> tuple[list[str], str, list[str]]:
    names: list[str] = []
    while len(names) < HOPS + 1:
        v = "".join(rng.choices(string.ascii_uppercase, k=letters))
        if v not in names:
            names.append(v)
    value = str(rng.randint(10000, 99999))
    statements = [T.VT_FIRST.format(name=names[0], value=value)]
    statements += [T.VT_HOP.format(name=names[j + 1], previous=names[j]) for j in range(HOPS)]
    return names, value, statements


def _vt_text(statements: list[str], seed: int, n: int, value: str) -> tuple[str, str, str, list[float]]:
    """The chain in ``n`` noise sentences at RULER's uniform line slots (variable_tracking.py, noise)."""
    lines, where = slotted(H.noise_units(n), statements, seed)
    return (f"{T.VT_INSTRUCTION}\n\n{chr(10).join(lines)}", T.VT_QUESTION.format(value=value),
            T.VT_PREFIX.format(count=HOPS + 1, value=value), where)


ICL_NOISE = 20  # noise sentences in vt's worked example (RULER fills a 500-token example; a shorter one here)


def vt(spec: T.Spec, rng: random.Random) -> Renderer:
    """RULER's variable_tracking.py: one chain of 4 hops in noise, after one worked example (its ICL
    example: a short chain in a little noise, with its answer)."""
    icl_names, icl_value, icl_statements = _chain(rng, 3)
    icl_ctx, icl_q, icl_prefix, _ = _vt_text(icl_statements, rng.getrandbits(64), ICL_NOISE, icl_value)
    icl = f"{icl_ctx}\n{icl_q}{icl_prefix}{' '.join(icl_names)}\n"
    names, value, statements = _chain(rng, 5)
    slot_seed = rng.getrandbits(64)

    def render(n: int) -> Example:
        ctx, question, prefix, where = _vt_text(statements, slot_seed, n, value)
        return Example(f"{icl}\n{ctx}", question, prefix, list(names), where)

    return render, None


# ---- common words extraction ----------------------------------------------------------------------------
COMMON = 10  # synthetic.yaml cwe: num_cw 10


def _numbered(words: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def cwe(spec: T.Spec, rng: random.Random, length: int) -> Renderer:
    """RULER's common_words_extraction.py: 10 words repeated among words that appear less often, after
    one worked example. Below 4096 tokens RULER repeats the common words 6 times and the others once
    (example: 20 words, 3 / 1); from 4096 on 30 / 3 (example: 40 words, 10 / 3)."""
    pool = plain_words(H.vocabulary())
    order = rng.sample(pool, len(pool))
    small = length < 4096
    common_rep, other_rep = (6, 1) if small else (30, 3)
    shot_n, shot_rep = (20, (3, 1)) if small else (40, (10, 3))
    shot_words = rng.sample(pool, shot_n)
    shot_list = shot_words[:COMMON] * shot_rep[0] + shot_words[COMMON:] * shot_rep[1]
    rng.shuffle(shot_list)
    shot = (f"{T.CWE_INSTRUCTION}\n{_numbered(shot_list)}\n{T.CWE_QUESTION}{T.CWE_PREFIX} "
            f"{_numbered(shot_words[:COMMON])}")
    seed = rng.getrandbits(64)

    def render(n: int) -> Example:
        # n: the words seen fewer times
        common, others = order[:COMMON], order[COMMON:COMMON + n]
        listed = common * common_rep + others * other_rep
        random.Random(f"{seed}:{n}").shuffle(listed)
        return Example(f"{shot}\n{T.CWE_INSTRUCTION}\n{_numbered(listed)}", T.CWE_QUESTION, T.CWE_PREFIX,
                       list(common))

    return render, len(order) - COMMON


# ---- frequent words extraction ---------------------------------------------------------------------------
ALPHA = 2.0  # synthetic.yaml fwe: alpha 2 (zeta(2) = pi^2 / 6)
ZETA = math.pi ** 2 / 6
CODED_LEN = 6


def fwe(spec: T.Spec, rng: random.Random, length: int) -> Renderer:
    """RULER's freq_words_extraction.py: coded words with Zipf(2) counts; the most frequent is '...'
    (noise the question says to ignore), the next three are the answer. Vocabulary: length // 50 words."""
    size = max(8, length // 50)
    vocab: list[str] = []
    while len(vocab) < size:
        w = "".join(rng.choices(string.ascii_lowercase, k=CODED_LEN))
        if w not in vocab:
            vocab.append(w)
    vocab[0] = "..."
    seed = rng.getrandbits(64)

    def render(n: int) -> Example:  # n: the number of words the counts are drawn for
        words = [w for k, w in enumerate(vocab, 1) for _ in range(int(n * k ** -ALPHA / ZETA))]
        random.Random(f"{seed}:{n}").shuffle(words)
        return Example(f"{T.FWE_INSTRUCTION} {' '.join(words)}", T.FWE_QUESTION, T.FWE_PREFIX, vocab[1:4])

    return render, None


def renderer(task: str, rng: random.Random, length: int) -> Renderer:
    """The render function of ``task`` (a name of :data:`.templates.TASKS`) and its largest haystack."""
    spec = T.TASKS[task]
    if spec.family == "niah":
        return niah(spec, rng)
    if spec.family == "vt":
        return vt(spec, rng)
    return cwe(spec, rng, length) if spec.family == "cwe" else fwe(spec, rng, length)
