"""Dates in gold answers, as LoCoMo writes them: find one, shift it, write it another way (no LLM).

LoCoMo's gold dates come as ``7 May 2023``, ``7 May, 2023``, ``May 7, 2023``, ``May 2023``,
``June, 2023`` or a bare year, often inside a phrase (``The week before 9 June 2023``). :func:`find_date`
finds the first one (full dates before month-years before years); :func:`shift` moves it (whole weeks
or months for a full date, 1-3 months for a month-year, 1-2 years for a year) and writes it in the same
layout; :func:`reformat` writes the same date in another layout (day-month ↔ month-day, "June of
2023", "the year 2022").
"""
from __future__ import annotations

import calendar
import random
import re
from dataclasses import dataclass
from datetime import date, timedelta

MONTHS = [calendar.month_name[i] for i in range(1, 13)]
_MONTH = "(" + "|".join(MONTHS) + ")"
_DMY = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s*" + _MONTH + r"(\s*,\s*|\s+)(\d{4})\b", re.I)
_MDY = re.compile(r"\b" + _MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?(\s*,\s*|\s+)(\d{4})\b", re.I)
_MY = re.compile(r"\b" + _MONTH + r"(\s*,\s*|\s+)(\d{4})\b", re.I)
_Y = re.compile(r"\b((?:19|20)\d{2})\b")


@dataclass(frozen=True)
class GoldDate:
    start: int
    end: int
    layout: str  # dmy | mdy | my | y
    year: int
    month: int = 1
    day: int = 1
    sep: str = " "  # what stood between the day/month part and the year (" " or ", ")


def _month(name: str) -> int:
    return MONTHS.index(name.capitalize()) + 1


def find_date(text: str) -> GoldDate | None:
    """The first date in ``text`` (a valid full date, else a month-year, else a year), or None."""
    for layout, pattern in (("dmy", _DMY), ("mdy", _MDY)):
        for m in pattern.finditer(text):
            day, month = (m.group(1), m.group(2)) if layout == "dmy" else (m.group(2), m.group(1))
            try:
                date(int(m.group(4)), _month(month), int(day))
            except ValueError:
                continue
            sep = ", " if "," in m.group(3) else " "
            return GoldDate(m.start(), m.end(), layout, int(m.group(4)), _month(month), int(day), sep)
    m = _MY.search(text)
    if m:
        return GoldDate(m.start(), m.end(), "my", int(m.group(3)), _month(m.group(1)),
                        sep=", " if "," in m.group(2) else " ")
    m = _Y.search(text)
    if m:
        return GoldDate(m.start(), m.end(), "y", int(m.group(1)))
    return None


def write(d: GoldDate, layout: str | None = None) -> str:
    """``d`` written in ``layout`` (default its own): ``7 May 2023``, ``May 7, 2023``, ``May 2023``, ``2023``."""
    layout = layout or d.layout
    month = MONTHS[d.month - 1]
    if layout == "dmy":
        return f"{d.day} {month}{d.sep}{d.year}"
    if layout == "mdy":
        return f"{month} {d.day}, {d.year}"
    if layout == "my":
        return f"{month}{d.sep}{d.year}"
    if layout == "my_of":
        return f"{month} of {d.year}"
    if layout == "y_the":
        return f"the year {d.year}"
    return str(d.year)


def shift(d: GoldDate, rng: random.Random) -> GoldDate:
    """Another date of the same layout: ± 1, 2, 3, 4 weeks or 2 months (full date), ± 1-3 months, ± 1-2 years."""
    sign = rng.choice((-1, 1))
    if d.layout in ("dmy", "mdy"):
        moved = date(d.year, d.month, d.day) + timedelta(days=sign * rng.choice((7, 14, 21, 28, 61)))
        return GoldDate(d.start, d.end, d.layout, moved.year, moved.month, moved.day, d.sep)
    if d.layout == "my":
        k = d.year * 12 + d.month - 1 + sign * rng.choice((1, 2, 3))
        return GoldDate(d.start, d.end, "my", k // 12, k % 12 + 1, sep=d.sep)
    return GoldDate(d.start, d.end, "y", d.year + sign * rng.choice((1, 2)))


def replace(text: str, d: GoldDate, new: str) -> str:
    return text[:d.start] + new + text[d.end:]


REFORMAT = {"dmy": "mdy", "mdy": "dmy", "my": "my_of", "y": "y_the"}


def reformat(text: str, d: GoldDate) -> str:
    """``text`` with its date written in the other layout (:data:`REFORMAT`): the same date."""
    return replace(text, d, write(d, REFORMAT[d.layout]))
