"""Session dates: the one parser, the conversation clock built from them, and what could not be read.

Datasets write a session's date as free text; MemoryBank's forgetting curve needs it as a time.
:func:`parse_session_date` reads, in this order:

1. LoCoMo's own formats, exactly ("1:56 pm on 8 May, 2023", "8 May, 2023", ...), and LongMemEval's
   ("2023/05/20 (Sat) 02:21"; the weekday in brackets is read but not checked against the date);
2. epoch seconds (9 to 11 digits, read as UTC);
3. ISO 8601 (``datetime.fromisoformat``: with ``T``, ``Z`` or an offset);
4. anything python-dateutil reads without guessing a year or a month: "April 16th, 2024 8:05pm",
   "Mon, 8 May 2023 13:56", "May 1, 2021" (DialSim), "08/05/2023".

Rules: a numeric day/month/year date is read **day first** ("08/05/2023" is 8 May 2023, LoCoMo's own
day-month order); one that cannot be day first ("05/13/2023") is read month first; a numeric date
whose first two fields could both be the day is counted as ``ambiguous`` in the report. An offset
or ``Z`` is dropped: the conversation's clock is the wall-clock time as written, so aware and naive
dates compare. A text without a year or a month ("Tuesday", "session 3") is not a date.

:func:`session_clock` turns one history's dates into times that never run backwards: a date that
could not be read (or is missing) is placed one day after the previous session (the first ones one
day apart before the first date read; 2000-01-01 when none is read); a session dated before an
earlier one is counted ``out_of_order`` and clamped to the latest time so far (no time passes).
:func:`session_date_report` counts both per history; ``eval`` writes it to results.json
(``session_dates``) and warns once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

LOCOMO_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y",
                  "%B %d, %Y", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y/%m/%d")
# LongMemEval's haystack_dates and question_date: "2023/05/20 (Sat) 02:21"
LONGMEMEVAL_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d (%a)")
EPOCH = datetime(2000, 1, 1)
_NUMERIC_DMY = re.compile(r"^\s*(\d{1,2})[/.-](\d{1,2})[/.-]\d{2,4}\b")
_EPOCH_SECONDS = re.compile(r"^\d{9,11}$")
# two defaults that differ in year, month and day: a field dateutil filled in differs between them
_DEFAULTS = (datetime(1901, 1, 1), datetime(1902, 2, 2))


def parse_session_date(text: str) -> datetime | None:
    """The time ``text`` names (naive, wall clock as written), or None when it is not a date."""
    s = re.sub(r"\s+", " ", (text or "").strip())
    if not s:
        return None
    upper = re.sub(r"\b(am|pm)\b", lambda m: m.group(1).upper(), s, flags=re.I)
    for fmt in LOCOMO_FORMATS + LONGMEMEVAL_FORMATS:
        try:
            return datetime.strptime(upper, fmt)
        except ValueError:
            continue
    if _EPOCH_SECONDS.match(s):
        return datetime.fromtimestamp(int(s), tz=timezone.utc).replace(tzinfo=None)
    if s.isdigit():
        return None
    try:
        return datetime.fromisoformat(s).replace(tzinfo=None)
    except ValueError:
        return _dateutil(s)


def _dateutil(s: str) -> datetime | None:
    from dateutil import parser

    got = []
    dayfirst = bool(_NUMERIC_DMY.match(s))  # only there: dateutil's dayfirst also turns 2023-05-08 around
    for default in _DEFAULTS:
        try:
            got.append(parser.parse(s, default=default, dayfirst=dayfirst))
        except (ValueError, OverflowError):
            return None
    a, b = got
    if a.year != b.year or a.month != b.month:  # no year or no month in the text: not a session date
        return None
    return a.replace(tzinfo=None)


def ambiguous_day_month(text: str) -> bool:
    """A numeric date whose first two fields could each be the day ("08/05/2023"; not "08/08/2023")."""
    m = _NUMERIC_DMY.match(text or "")
    return bool(m) and int(m.group(1)) <= 12 and int(m.group(2)) <= 12 and m.group(1) != m.group(2)


@dataclass
class SessionClock:
    """One history's session times (never decreasing) and what the dates did not say."""

    times: list[datetime]
    unparsed: list[str] = field(default_factory=list)  # dates that were not read (the texts)
    missing: int = 0  # sessions without a date
    out_of_order: int = 0  # sessions dated before an earlier session (clamped)
    ambiguous: int = 0  # numeric dates read day first although either field could be the day

    def counts(self) -> dict[str, Any]:
        """The non-zero counts (and the unread texts, the first 5)."""
        out: dict[str, Any] = {k: v for k, v in (("unparsed", len(self.unparsed)), ("missing", self.missing),
                                                 ("out_of_order", self.out_of_order),
                                                 ("ambiguous", self.ambiguous)) if v}
        if self.unparsed:
            out["unparsed_examples"] = self.unparsed[:5]
        return out


def session_clock(dates: Iterable[str]) -> SessionClock:
    """The times of sessions dated ``dates`` (in session order), by the rules of the module doc."""
    texts = [d or "" for d in dates]
    parsed = [parse_session_date(d) for d in texts]
    clock = SessionClock(times=[])
    first = next((i for i, t in enumerate(parsed) if t is not None), None)
    latest: datetime | None = None
    for i, (text, t) in enumerate(zip(texts, parsed)):
        if t is None:
            if text.strip():
                clock.unparsed.append(text)
            else:
                clock.missing += 1
            if clock.times:
                t = clock.times[-1] + timedelta(days=1)
            else:
                t = parsed[first] - timedelta(days=first - i) if first is not None else EPOCH + timedelta(days=i)
        else:
            clock.ambiguous += ambiguous_day_month(text)
            if latest is not None and t < latest:
                clock.out_of_order += 1
            latest = t if latest is None else max(latest, t)
        clock.times.append(max(t, clock.times[-1]) if clock.times else t)
    return clock


def session_date_report(samples: Iterable[Any]) -> dict[str, Any]:
    """results.json ``session_dates``: totals over the dataset's histories and, per history with
    anything to report, its counts (:meth:`SessionClock.counts`)."""
    totals = {"sessions": 0, "unparsed": 0, "missing": 0, "out_of_order": 0, "ambiguous": 0}
    histories: dict[str, dict[str, Any]] = {}
    for sample in samples:
        sessions = list(sample.history.sessions or [])
        if not sessions:
            continue
        counts = session_clock([s.date for s in sessions]).counts()
        totals["sessions"] += len(sessions)
        for k in ("unparsed", "missing", "out_of_order", "ambiguous"):
            totals[k] += counts.get(k, 0)
        if counts:
            histories[str(sample.history.id)] = counts
    return {**totals, "histories": histories}


def report_line(report: dict[str, Any]) -> str:
    """One warning line for a report with unread or out-of-order dates, else ''."""
    parts = []
    if report.get("unparsed"):
        ex = next((h["unparsed_examples"][0] for h in report["histories"].values() if h.get("unparsed_examples")), "")
        parts.append(f"{report['unparsed']} session date(s) could not be read (e.g. {ex!r}): each placed one day "
                     "after the previous session")
    if report.get("out_of_order"):
        parts.append(f"{report['out_of_order']} session(s) are dated before an earlier session: the memory clock "
                     "holds still for them")
    if not parts:
        return ""
    hs = [h for h, c in report["histories"].items() if c.get("unparsed") or c.get("out_of_order")]
    return "; ".join(parts) + f" (histories: {', '.join(hs[:5])}{' ...' if len(hs) > 5 else ''}; see results.json " \
                              "session_dates)"


def question_time(question: Any) -> datetime | None:
    """The time a question is asked (``Question.meta["question_date"]``, LongMemEval's ``question_date``),
    or None when the dataset does not say. Systems with a clock (MemoryBank's forgetting, A-Mem's and
    Mem0's timestamps) take it as "now" when they answer that question."""
    meta = getattr(question, "meta", None) or {}
    text = meta.get("question_date") if isinstance(meta, dict) else None
    return parse_session_date(text) if isinstance(text, str) and text.strip() else None
