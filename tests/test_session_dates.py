"""Session dates (ctxbench/data/dates.py): the formats real exports write are read, LoCoMo's exactly;
what is not a date is counted and reported, never silently turned into 2000-01-01 + n days; sessions
out of date order are counted and MemoryBank's clock never runs backwards; aware and naive dates mix."""
from __future__ import annotations

from datetime import datetime

import pytest

from ctxbench.config.compose import option_config
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.data.dates import EPOCH, parse_session_date, report_line, session_clock, session_date_report
from ctxbench.memory.memorybank import MemoryBank

from memory_scripted import BowEmbedder, ScriptedLLM

MAY8 = datetime(2023, 5, 8, 13, 56)


@pytest.mark.parametrize("text,want", [
    ("1:56 pm on 8 May, 2023", MAY8),                      # LoCoMo's own
    ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
    ("2023-05-08T13:56:00", MAY8),                          # ISO with T
    ("2023-05-08T13:56:00Z", MAY8),                         # ... Z: the wall clock as written
    ("2023-05-08T13:56:00+02:00", MAY8),                    # ... an offset
    ("2023-05-08", datetime(2023, 5, 8)),                   # never turned into 5 August
    ("08/05/2023", datetime(2023, 5, 8)),                   # day first
    ("08.05.2023", datetime(2023, 5, 8)),
    ("05/13/2023", datetime(2023, 5, 13)),                  # cannot be day first: month first
    ("April 16th, 2024 8:05pm", datetime(2024, 4, 16, 20, 5)),
    ("Mon, 8 May 2023 13:56", MAY8),
    ("Mon, 8 May 2023 13:56:00 +0200", MAY8),
    ("May 1, 2021", datetime(2021, 5, 1)),                  # DialSim
    ("1683554160", MAY8),                                   # epoch seconds (UTC)
])
def test_formats_real_exports_write_are_read(text, want):
    assert parse_session_date(text) == want


@pytest.mark.parametrize("text", ["", "   ", "garbage", "Tuesday", "session 3", "3", "8 May", "sometime in spring"])
def test_what_is_not_a_date_is_none(text):
    assert parse_session_date(text) is None


def test_unread_dates_are_placed_after_the_previous_session_and_counted():
    c = session_clock(["Tuesday", "8 May, 2023", "", "sometime", "10 May, 2023"])
    assert c.times == [datetime(2023, 5, 7), datetime(2023, 5, 8), datetime(2023, 5, 9), datetime(2023, 5, 10),
                       datetime(2023, 5, 10)]
    assert c.unparsed == ["Tuesday", "sometime"] and c.missing == 1 and c.out_of_order == 0
    assert session_clock(["x", "y"]).times == [EPOCH, datetime(2000, 1, 2)]  # none read: the old epoch


def test_out_of_order_sessions_are_counted_and_the_clock_holds_still():
    c = session_clock(["8 May, 2023", "1 May, 2023", "2023-05-10T09:00:00Z", "9 May, 2023"])
    assert c.out_of_order == 2
    assert c.times == sorted(c.times) and c.times[1] == c.times[0] and c.times[3] == c.times[2]


def test_aware_and_naive_dates_compare():
    c = session_clock(["2023-05-08T10:00:00+05:00", "9 May, 2023", "2023-05-10T10:00:00Z"])
    assert all(t.tzinfo is None for t in c.times) and c.times == sorted(c.times) and c.out_of_order == 0


def test_report_per_history_and_one_warning_line():
    def sample(hid, dates):
        return Sample(History(hid, [Session(f"s{i}", [Turn("A", "hi", f"D{i}:1")], d) for i, d in enumerate(dates)]),
                      [])
    rep = session_date_report([sample("ok", ["8 May, 2023", "9 May, 2023"]),
                               sample("odd", ["08/05/2023", "Tuesday", "1 May, 2023"])])
    assert rep["sessions"] == 5 and rep["unparsed"] == 1 and rep["out_of_order"] == 1 and rep["ambiguous"] == 1
    assert rep["histories"] == {"odd": {"unparsed": 1, "out_of_order": 1, "ambiguous": 1,
                                        "unparsed_examples": ["Tuesday"]}}
    line = report_line(rep)
    assert "1 session date(s) could not be read (e.g. 'Tuesday')" in line and "dated before" in line and "odd" in line
    assert report_line(session_date_report([sample("ok", ["8 May, 2023"])])) == ""


def test_memorybank_clock_never_runs_backwards(tmp_path):
    """Sessions out of date order (and an aware date beside naive ones): every turn's time, and the
    time the forgetting curve measures from, never decreases."""
    sessions = [Session("s1", [Turn("Ann", "I adopted a cat", "D1:1")], "2023-05-08T10:00:00+02:00"),
                Session("s2", [Turn("Ann", "I went hiking", "D2:1")], "1 May, 2023"),
                Session("s3", [Turn("Ann", "I baked bread", "D3:1")], "9 May, 2023")]
    cfg = option_config("memory", {"name": "memorybank", "progress": False})
    mem = MemoryBank(cfg, llm=ScriptedLLM(lambda m, p: "a summary"), embedder=BowEmbedder(), workdir=tmp_path)
    mem.ingest(History("h", sessions))
    times = [r.time for r in mem.store.records("h", "turn", include_deleted=True)]
    assert len(times) == 3 and times == sorted(times) and times[1] == times[0]
    assert mem.now == max(times)
    mem.answer(Question("q", "What did Ann adopt?", "a cat"))  # retention measured at a time not before any turn
    mem.close()
