"""Sessions shared across histories: the embedder encodes a shared session's chunks once across histories,
the call cache serves a shared session's construction prompt (counted apart from rows of earlier runs),
results.json carries the ``reuse`` block, estimate.json the same names, and one definition of a distinct
session (id + turns, not the date) serves data stats, the estimate and the run."""
from __future__ import annotations

import json

import numpy as np

from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.core import registry
from ctxbench.core.types import History, Sample, Session, Turn
from ctxbench.data.sessions import distinct_sessions, session_key
from ctxbench.evaluation.estimate import planned_questions
from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.evaluation.reuse import markdown, measured
from ctxbench.llm.cache import CachedLLM
from ctxbench.llm.shared import SharedLLM
from ctxbench.memory.stores.embedder import CachingEmbedder
from ctxbench.qa import get_prompt

from conftest import TINY_ANSWERS, run_cli
from memory_scripted import BowEmbedder
from test_estimate import config, samples

ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}


class CountingEmbedder(CachingEmbedder):
    """The run's LRU over a bag-of-words encoder that records every text it encodes."""

    def __init__(self, cache_size: int = 1000) -> None:
        self.inner = BowEmbedder()
        self.dim = self.inner.dim
        super().__init__(cache_size)
        self.encoded: list[str] = []

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.encoded += texts
        return self.inner.encode(texts)


def run(name: str, tmp_path, embedder=None, cache_file=None, **settings):
    cfg = config(name)
    for k, v in settings.items():
        cfg[k] = v
    inner = ScriptedChatModel()
    llm = SharedLLM(CachedLLM(inner, cache_file or tmp_path / "cache.sqlite", backend="scripted"))
    prompt = get_prompt(None)

    def make(hid: str):
        system = registry.build("memory", cfg, llm=llm, embedder=embedder, workdir=tmp_path / "stores" / hid)
        system.use_prompt(prompt)
        return system

    data = samples()
    run_system(HistorySystems(make), data, tmp_path, llm=llm, progress=False)
    return measured([s.history for s in data], llm, embedder, resumed=False), inner


def test_a_shared_sessions_chunks_are_encoded_once_across_histories(tmp_path):
    from ctxbench.memory.rag import chunk_turns

    emb = CountingEmbedder()
    block, _ = run("rag", tmp_path, embedder=emb)
    data = samples()
    cfg = config("rag")
    slots = [c[0] for s in data for sess in s.history.sessions for c in chunk_turns(sess, cfg.chunk_size, cfg.overlap)]
    queries = [q.question for s in data for q in s.questions]
    assert len(set(slots)) < len(slots)  # the three histories share sessions
    assert sorted(emb.encoded) == sorted(set(slots) | set(queries))  # each distinct text encoded once, no more
    assert block["embeddings"] == {"requested": len(slots) + len(queries), "encoded": len(set(slots) | set(queries)),
                                   "evicted": 0, "cache_size": 1000}
    assert (block["session_slots"], block["distinct_sessions"]) == (9, 5)


def test_the_lru_keeps_the_recently_used_and_counts_evictions():
    emb = CountingEmbedder(cache_size=2)
    emb.encode(["a", "b"])
    emb.encode(["a"])  # a is now the most recently used
    emb.encode(["c"])  # evicts b, not a
    emb.encode(["a", "b"])
    assert emb.encoded == ["a", "b", "c", "b"]
    assert emb.reuse_counts() == {"requested": 6, "encoded": 4, "evicted": 2, "cache_size": 2}
    np.testing.assert_allclose(emb.encode(["b"])[0], BowEmbedder().encode(["b"])[0])


def test_shared_session_summaries_are_served_by_the_call_cache_and_counted_apart(tmp_path):
    """9 session slots of 5 distinct sessions: 9 summary calls requested, 4 served from the cache by this run,
    5 made; a second run on the same cache file is served all 9 by rows an earlier run wrote."""
    block, inner = run("rag", tmp_path / "one", embedder=BowEmbedder(), cache_file=tmp_path / "cache.sqlite",
                       granularity="session_summary")
    assert block["construction_calls"] == {"requested": 9, "served_from_cache": 4, "served_from_this_run": 4,
                                           "served_from_earlier_runs": 0}
    c = inner.meter.total("construction")  # the backend's meter counts a cache hit as a call, flagged cached
    assert c.calls - c.cached == 5  # the model itself: once per distinct session
    again, inner2 = run("rag", tmp_path / "two", embedder=BowEmbedder(), cache_file=tmp_path / "cache.sqlite",
                        granularity="session_summary")
    assert again["construction_calls"] == {"requested": 9, "served_from_cache": 9, "served_from_this_run": 0,
                                           "served_from_earlier_runs": 9}
    c = inner2.meter.total("construction")
    assert c.calls == c.cached == 9  # no summary reached the model
    assert "9 requested, 9 served from the call cache (0 stored by this run)" in markdown(again)


def test_a_distinct_session_is_its_id_and_turns_not_its_date():
    turns = [Turn("user", "hello there", "s_1")]
    a, b = Session("s", turns, "2023/05/20 (Sat) 02:21"), Session("s", turns, "2023/05/24 (Wed) 10:00")
    other = Session("s", [Turn("user", "something else", "s_1")], "2023/05/20 (Sat) 02:21")  # LoCoMo's session_1
    assert session_key(a) == session_key(b) != session_key(other)
    hs = [Sample(History("q1", [a]), []), Sample(History("q2", [b]), []), Sample(History("q3", [other]), [])]
    d = distinct_sessions(hs)
    assert (d["session_slots"], d["distinct_sessions"], d["distinct_dated_sessions"]) == (3, 2, 3)


def test_results_json_and_estimate_json_carry_the_reuse_block(tmp_path):
    """rag on the first 4 LongMemEval sample questions with the real MiniLM: every chunk and query text is
    requested, the shared sessions' chunks are encoded once; estimate=true plans the same names."""
    from ctxbench.config.compose import option_config

    args = ["memory=rag", "dataset=longmemeval_sample", "limit=4", "llm.model=tiny", TINY_ANSWERS,
            f"llm.cache_path={tmp_path / 'cache.sqlite'}", "progress=false", "metrics=[f1]"]
    p = run_cli("eval", *args, f"hydra.run.dir={tmp_path / 'run'}", env=ENV, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    reuse = json.loads((tmp_path / "run" / "results.json").read_text())["reuse"]
    lme = registry.build("dataset", option_config("dataset", {"name": "longmemeval_sample"}))
    plan = planned_questions(lme, 4)
    d = distinct_sessions(h for h, _ in plan)
    assert (reuse["session_slots"], reuse["distinct_sessions"]) == (d["session_slots"], d["distinct_sessions"])
    assert reuse["distinct_sessions"] < reuse["session_slots"]  # the first 4 haystacks share sessions
    assert reuse["counted"] == "this process" and reuse["resumed"] is False
    assert reuse["construction_calls"]["requested"] == 0  # rag turns: no construction call
    p = run_cli("eval", *args, "estimate=true", f"hydra.run.dir={tmp_path / 'est'}", env=ENV, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    est = json.loads((tmp_path / "est" / "estimate.json").read_text())["reuse"]
    assert est["embeddings"] == {k: reuse["embeddings"][k] for k in ("requested", "encoded")}
    assert est["embeddings"]["encoded"] < est["embeddings"]["requested"]
    assert {k: est[k] for k in ("session_slots", "distinct_sessions")} == \
        {k: reuse[k] for k in ("session_slots", "distinct_sessions")}
    assert "**Shared work**" in (tmp_path / "run" / "results.md").read_text()


def test_redated_shared_sessions_embed_once_only_without_dates(tmp_path, monkeypatch):
    """LongMemEval_S dates a shared session anew in each haystack: its dated chunks differ per history, so
    only memory.embed_dates=false (the reader still sees the date) embeds them once per distinct session."""
    import test_shared_sessions as me
    from ctxbench.memory.rag import chunk_turns

    original = me.samples

    def redated():
        out = []
        for i, s in enumerate(original()):
            sessions = [Session(x.id, x.turns, f"2023/0{i + 1}/1{j} (Mon) 10:00") for j, x in enumerate(s.history.sessions)]
            out.append(Sample(History(s.history.id, sessions, speakers=s.history.speakers), s.questions))
        return out

    monkeypatch.setattr(me, "samples", redated)
    cfg = config("rag")
    bodies = {c[0][c[0].index("] ") + 2:] for s in redated() for sess in s.history.sessions
              for c in chunk_turns(sess, cfg.chunk_size, cfg.overlap)}
    queries = {q.question for s in redated() for q in s.questions}
    dated = CountingEmbedder()
    run("rag", tmp_path / "dated", embedder=dated)
    undated = CountingEmbedder()
    run("rag", tmp_path / "undated", embedder=undated, embed_dates=False)
    assert sorted(undated.encoded) == sorted(bodies | queries)  # each distinct session's chunks once
    assert len(dated.encoded) > len(undated.encoded)  # dated: every slot's chunks again
    assert all(t.startswith("[2023/0") for t in set(dated.encoded) - queries)  # the stored text keeps its date
