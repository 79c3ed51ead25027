"""The bad-input sweep's ``faults`` cases of issue 37's silently wrong memory construction and session
dates (run by ``tests/bad_input/harness.py`` like every case of ``cases.py``).

- session dates in the formats real exports write, two of them not dates: the run succeeds and
  results.json ``session_dates`` counts the two it could not read (with a warning line);
- sessions out of date order under MemoryBank: the run succeeds, counts it and warns, and the
  memory clock holds still (the turns' times in the store never decrease);
- a server failing every call while a memory is built: the history is not answered and the run
  ends in one line, "construction stopped at step 1/N after a failed call".

The LoCoMo files are written here by hand (no shared data needed). The rerun half of a failed
construction (a healthy rerun ends as a clean run) takes two runs: tests/test_memory_construction_faults.py.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Callable

from bad_input.cases import EVAL, FAST_RETRY, Case, Make

GROUP = "faults"
ODD_DATES = ["1:56 pm on 8 May, 2023", "2023-05-09T13:56:00+02:00", "10/05/2023", "May 11th, 2023 8:05pm",
             "Fri, 12 May 2023 13:56", "sometime in spring", "Tuesday"]
OUT_OF_ORDER = ["8 May, 2023", "1 May, 2023", "10 May, 2023"]


def locomo_file(dates: list[str]) -> Make:
    """``{work}/in``: one LoCoMo conversation with a session of two turns per date, and two questions."""
    def make(work: Path, ctx: dict) -> None:
        conv: dict = {"speaker_a": "Ann", "speaker_b": "Bob"}
        for s, date in enumerate(dates, 1):
            conv[f"session_{s}"] = [{"speaker": "Ann", "dia_id": f"D{s}:1", "text": f"On day {s} I went hiking."},
                                    {"speaker": "Bob", "dia_id": f"D{s}:2", "text": f"Nice, day {s} sounds fun."}]
            conv[f"session_{s}_date_time"] = date
        qa = [{"question": "What did Ann do?", "answer": "hiking", "evidence": ["D1:1"], "category": 4},
              {"question": "Who replied?", "answer": "Bob", "evidence": ["D1:2"], "category": 4}]
        (work / "in").write_text(json.dumps([{"sample_id": "conv-dates", "conversation": conv, "qa": qa}]))
    return make


def on_file(memory: str) -> list[str]:
    """The sweep's eval command line on ``{work}/in`` with ``memory`` (embedder minilm where it needs one)."""
    return [a.replace("memory=no_context", f"memory={memory}") for a in EVAL] + ["dataset=locomo",
                                                                               "dataset.path={work}/in"]


def dates_reported(unparsed: int, out_of_order: int) -> Callable[[str, Path], bool]:
    """A recovery check: results.json counts the dates, and the run said so in a warning line."""
    def check(out: str, work: Path) -> bool:
        res = work / "run" / "results.json"
        if not res.exists() or "warning: dataset=locomo:" not in out:
            return False
        d = json.loads(res.read_text())["session_dates"]
        return d["unparsed"] == unparsed and d["out_of_order"] == out_of_order
    return check


def clock_holds_still(out: str, work: Path) -> bool:
    """The out-of-order session is counted and MemoryBank's turns carry times that never decrease."""
    if not dates_reported(0, 1)(out, work):
        return False
    times = []
    for db in (work / "run" / "stores").glob("*/memorybank.sqlite"):
        conn = sqlite3.connect(db)
        times += [t for (t,) in conn.execute("SELECT time FROM records WHERE kind='turn' ORDER BY id")]
        conn.close()
    return len(times) == 2 * len(OUT_OF_ORDER) and times == sorted(times)


def cases() -> list[Case]:
    return [
        Case("faults.memfault_dates_unparsed", GROUP,
             "session dates as real exports write them (ISO with T and an offset, day/month/year, ordinals, "
             "RFC 2822), two of them not dates", on_file("no_context"), locomo_file(ODD_DATES),
             ok_if_success=True, must_recover=True, recovery=dates_reported(2, 0)),
        Case("faults.memfault_dates_out_of_order", GROUP,
             "MemoryBank on sessions out of date order: counted, warned, the clock holds still",
             on_file("memorybank"), locomo_file(OUT_OF_ORDER), ok_if_success=True, must_recover=True,
             recovery=clock_holds_still, timeout=180),
        Case("faults.memfault_construction_fails", GROUP,
             "every LLM call fails while ReadAgent builds its memory: nothing answered, one line",
             on_file("readagent") + FAST_RETRY, locomo_file(OUT_OF_ORDER[:1] + ["9 May, 2023"]), server="http500",
             expect=("construction stopped at step 1/",)),
        Case("faults.memfault_control", GROUP, "a LoCoMo file with well-formed dates (control)",
             on_file("no_context"), locomo_file(["8 May, 2023", "9 May, 2023"]), control=True),
    ]
