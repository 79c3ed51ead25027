"""Haystacks and fitting them to a length: RULER's noise sentences, real prose, needles at depths.

- noise: RULER's five sentences repeated (:data:`.templates.NOISE`), five to a line; the unit that
  grows or shrinks is one sentence, so a haystack fits its length to a few tokens.
- essay: real prose. RULER uses Paul Graham's essays (downloaded); ctxbench uses the public-domain
  Tiny Shakespeare sample it ships (``ctxbench/samples/shakespeare_sample.txt``), whitespace collapsed
  to single spaces as RULER does, starting at a seeded sentence start (RULER always starts at the
  first word; a seeded start gives each example its own prose) and wrapping round when a length
  needs more words than the text has. The unit is one word; needles go between sentences.
- needle: distractor needles with other keys (RULER's multikey_2/3 haystack); the unit is one needle.

:func:`insert_at_depths` puts items at fractions of a haystack's units (RULER's 40-point depth grid: its
essay haystack only); :func:`uniform_slots` draws the slots RULER's noise and needle haystacks use
(``random.sample(range(units), k)``: distinct lines, each item before its line, so never after the
last line); :func:`fit` finds the largest
haystack whose rendered input stays within a token budget (grow by doubling, then binary search, as
RULER's generators do).
"""
from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Callable

from ctxbench.core.paths import samples_dir
from ctxbench.data.ruler.templates import NOISE

ESSAY_FILE = "shakespeare_sample.txt"
# RULER's depth grid for essay haystacks: 40 points from 0% to 100%, rounded to whole percents (niah.py DEPTHS)
DEPTHS = tuple(round(100 * i / 39) / 100 for i in range(40))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@lru_cache(maxsize=1)
def essay_words() -> tuple[str, ...]:
    """The shipped public-domain text as words (whitespace collapsed, RULER's essay haystack treatment)."""
    text = (samples_dir() / ESSAY_FILE).read_text(encoding="utf-8")
    return tuple(re.sub(r"\s+", " ", text).strip().split(" "))


@lru_cache(maxsize=1)
def sentence_starts() -> tuple[int, ...]:
    """Indexes of the essay words that start a sentence (the seeded start of an essay haystack)."""
    words = essay_words()
    return (0,) + tuple(i + 1 for i, w in enumerate(words[:-1]) if w[-1:] in ".!?")


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """The essay's distinct lowercase alphabetic words of 3+ letters, in first-seen order (extra common words)."""
    seen: dict[str, None] = {}
    for w in essay_words():
        w = w.strip(".,;:!?'\"()-").lower()
        if len(w) >= 3 and w.isalpha():
            seen.setdefault(w, None)
    return tuple(seen)


def noise_units(n: int) -> list[str]:
    """``n`` noise sentences as lines of five (the last may be shorter)."""
    sents = [NOISE[i % len(NOISE)] for i in range(n)]
    return [" ".join(sents[i:i + len(NOISE)]) for i in range(0, n, len(NOISE))]


def essay_units(start: int, n: int) -> list[str]:
    """``n`` essay words from word ``start`` (wrapping round), split into sentences."""
    words = essay_words()
    picked = [words[(start + i) % len(words)] for i in range(n)]
    text = " ".join(picked).strip()
    return [s for s in _SENTENCE_END.split(text) if s] if text else []


def insert_at_depths(units: list[str], items: list[str], depths: list[float]) -> list[str]:
    """``units`` with ``items[j]`` inserted before unit ``int(len(units) * depths[j])`` (depths sorted ascending)."""
    return _before(units, items, [int(len(units) * d) for d in depths])


def _before(units: list[str], items: list[str], slots: list[int]) -> list[str]:
    out: list[str] = []
    k = 0
    for i, unit in enumerate(units):
        while k < len(items) and slots[k] <= i:
            out.append(items[k])
            k += 1
        out.append(unit)
    out.extend(items[k:])
    return out


def uniform_slots(units: int, k: int, seed: int) -> list[int]:
    """RULER's placement in its noise and needle haystacks (niah.py ``random.sample(range(num_haystack),
    len(needles))``; variable_tracking.py the same for its chain): ``k`` distinct line indexes drawn
    uniformly from ``range(units)``, ascending, each item to go before its line. Seeded per example
    (the same seed gives the same slots for a haystack size). Fewer lines than items (a near-empty
    haystack while fitting): slots drawn with repeats from ``range(units + 1)``."""
    rng = random.Random(seed)
    if units >= k:
        return sorted(rng.sample(range(units), k))
    return sorted(rng.choice(range(units + 1)) for _ in range(k))


def insert_before(units: list[str], items: list[str], slots: list[int]) -> tuple[list[str], list[float]]:
    """``units`` with ``items[j]`` before unit ``slots[j]`` (slots ascending), and each item's depth
    (its slot as a share of the units)."""
    return _before(units, items, slots), [round(s / len(units), 4) if units else 0.0 for s in slots]


def fit(measure: Callable[[int], int], budget: int, start: int = 16, most: int | None = None) -> int:
    """The largest haystack size ``0 <= n <= most`` with ``measure(n) <= budget`` (``measure`` grows with
    ``n``); -1 when even an empty haystack is over the budget."""
    if measure(0) > budget:
        return -1
    lo, hi = 0, max(1, start)
    while measure(hi) <= budget:
        if most is not None and hi >= most:
            return most
        lo, hi = hi, hi * 2
    if most is not None:
        hi = min(hi, most + 1)
    while hi - lo > 1:  # measure(lo) <= budget < measure(hi)
        mid = (lo + hi) // 2
        if measure(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo
