"""MemoryBank: retention R = exp(-t/S) over the conversation's own dates, S += 1 and t reset on
recall, forgetting below the threshold at a later day (``forgetting=threshold``, the earlier rule kept as
an option), summaries/portrait built per day. The reference's random forgetting: test_memory_memorybank_forgetting.py."""
from __future__ import annotations

import math
from datetime import datetime

import pytest
from omegaconf import OmegaConf

from ctxbench.data.dates import parse_session_date
from ctxbench.memory.memorybank import MemoryBank, retention
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM
from ctxbench.config.compose import option_config

D1, D2, D3 = "1:00 pm on 1 May, 2023", "9:00 am on 2 May, 2023", "1:00 pm on 5 May, 2023"


def history() -> History:
    return History(id="h", sessions=[
        Session("s1", [Turn("Alice", "I love hiking in the mountains", "D1:1"),
                       Turn("Bob", "I bake bread every weekend", "D1:2")], D1),
        Session("s2", [Turn("Alice", "hiking in the mountains again", "D2:1")], D2),
        Session("s3", [Turn("Carol", "weather is nice", "D3:1")], D3)])


def test_parse_locomo_dates():
    assert parse_session_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_session_date("10:37 am on 27 June, 2023") == datetime(2023, 6, 27, 10, 37)
    assert parse_session_date("garbage") is None  # the clock places it (tests/test_session_dates.py)


def test_retention_formula():
    assert retention(0, 1) == 1.0
    assert retention(3, 2) == pytest.approx(math.exp(-1.5))
    assert retention(2, 4) > retention(2, 1)  # stronger memories fade slower (not exp(-t/5*S))


def test_forgetting_and_strength_over_conversation_dates(tmp_path):
    cfg = option_config("memory", {"name": "memorybank", "k": 2, "forgetting": "threshold", "forget_threshold": 0.04, "recall_k": 1,
                            "recall_threshold": 0.5, "progress": False})
    llm = ScriptedLLM(lambda m, p: "hiking answer" if p == "answer" else "summary text")
    mb = MemoryBank(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    mb.ingest(history())
    every = {r.text: r for r in mb.store.records("h", "turn", include_deleted=True)}
    hike, bread, again, carol = (every[k] for k in ("Alice: I love hiking in the mountains",
                                                    "Bob: I bake bread every weekend",
                                                    "Alice: hiking in the mountains again",
                                                    "Carol: weather is nice"))
    # day 2 recalled the hiking memory: S 1 -> 2, t restarts on 2 May 09:00
    assert hike.meta["S"] == 2.0 and hike.meta["last"] == "2023-05-02T09:00:00"
    # on 5 May 13:00: hiking t = 3.1667 d, S = 2 -> R = 0.205 (kept); bread t = 4 d, S = 1 -> 0.018 (forgotten)
    now = datetime(2023, 5, 5, 13)
    assert mb.retention_of(hike, now) == pytest.approx(math.exp(-(3 + 4 / 24) / 2))
    assert not hike.deleted and bread.deleted
    # the day-2 memory: t = 3.1667 d, S = 1 -> R = 0.042 >= 0.04, kept
    assert mb.retention_of(again, now) == pytest.approx(math.exp(-(3 + 4 / 24))) and not again.deleted
    assert not carol.deleted
    forgets = [c for c in mb.store.changes("h") if c["op"] == "FORGET"]
    assert [c["record_id"] for c in forgets] == [bread.id]
    # one event summary per day, a portrait update per day, one global summary: 3 + 3 + 1 calls
    assert len(mb.store.records("h", "event")) == 3 and llm.meter.get("construction").calls == 7
    # answering recalls what it retrieved: strength grows, t restarts at the last session time
    pred = mb.answer(Question("q", "hiking in the mountains", "x"))
    assert "Summary: summary text" in pred.meta["context"] and "Portrait:" in pred.meta["context"]
    hike2 = mb.store.get(hike.id)
    assert hike2.meta["S"] == 3.0 and hike2.meta["last"] == "2023-05-05T13:00:00"
