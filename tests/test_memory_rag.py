"""RAG: chunking with overlap, the true top-k by cosine, session summaries counted as construction."""
from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from ctxbench.memory.rag import RAG, chunk_turns
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM
from ctxbench.config.compose import option_config

WORDS = "apple banana cherry dog eagle falcon grape hat ice jam kite lemon".split()


def history() -> History:
    rng = np.random.default_rng(0)
    sessions = []
    for s in range(3):
        turns = [Turn("A" if i % 2 == 0 else "B", " ".join(rng.choice(WORDS, 4)), f"D{s + 1}:{i + 1}")
                 for i in range(7)]
        sessions.append(Session(f"session_{s + 1}", turns, f"1:00 pm on {s + 1} May, 2023"))
    return History(id="h", sessions=sessions)


def test_chunking_overlap():
    s = history().sessions[0]
    chunks = chunk_turns(s, 3, 1)
    assert [c[1] for c in chunks] == [["D1:1", "D1:2", "D1:3"], ["D1:3", "D1:4", "D1:5"], ["D1:5", "D1:6", "D1:7"]]
    assert [c[1] for c in chunk_turns(s, 2, 0)][-1] == ["D1:7"]
    with pytest.raises(ValueError, match="overlap"):
        chunk_turns(s, 2, 2)


def test_true_top_k(tmp_path):
    emb = BowEmbedder()
    cfg = option_config("memory", {"name": "rag", "k": 4, "chunk_size": 2, "overlap": 1, "progress": False})
    llm = ScriptedLLM(lambda m, p: "x")
    rag = RAG(cfg, llm=llm, embedder=emb, workdir=tmp_path)
    rag.ingest(history())
    recs = rag.store.records("h")
    assert len(recs) == 3 * 6  # 7 turns, windows of 2 advancing by 1
    q = "banana dog lemon kite"
    sims = emb.encode([r.text for r in recs]) @ emb.encode([q])[0]
    top = np.sort(sims)[::-1][:4]
    hits = rag.search(q, 4)
    ids = [r.id for r in recs]
    got_sims = [sims[ids.index(r.id)] for r, _ in hits]
    assert np.allclose(got_sims, top, atol=1e-5)  # the true top-4 scores, best first
    assert np.allclose([s for _, s in hits], top, atol=1e-5)  # reported scores are the cosines
    got = [r.id for r, _ in hits]
    pred = rag.answer(Question("q", q, "x"))
    assert pred.meta["context"].split("\n")[0] in [r.text for r in recs if r.id == got[0]][0]
    assert pred.usage.construction_calls == 0 and pred.usage.answer_calls == 1
    assert pred.usage.memory_items == 18


def test_session_summaries(tmp_path):
    cfg = option_config("memory", {"name": "rag", "k": 2, "granularity": "session_summary", "progress": False})
    llm = ScriptedLLM(lambda m, p: "summary of " + m[-1]["content"].split("\n")[0])
    rag = RAG(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)
    rag.ingest(history())
    assert len(rag.store.records("h", "summary")) == 3
    assert llm.meter.get("construction").calls == 3
    pred = rag.answer(Question("q", "what happened on 2 May?", "x"))
    assert pred.usage.construction_calls == 3


def test_history_limits(tmp_path):
    cfg = option_config("memory", {"name": "rag", "k": 2, "chunk_size": 1, "max_sessions": 2, "max_turns": 9,
                            "progress": False})
    rag = RAG(cfg, llm=ScriptedLLM(lambda m, p: "x"), embedder=BowEmbedder(), workdir=tmp_path)
    rag.ingest(history())
    got = [r.meta["turns"][0] for r in rag.store.records("h")]
    assert got == [f"D1:{i}" for i in range(1, 8)] + ["D2:1", "D2:2"]
