"""Evidence recall (ctxbench/metrics/evidence_recall.py) on hand-made rankings, on a synthetic haystack
retrieved by RAG with the real MiniLM embedder, and the provenance every retrieving memory system
returns (Prediction.meta["retrieved"])."""
from __future__ import annotations

import json
import math
import re

import pytest

from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.types import History, Question, Session, Turn
from ctxbench.evaluation.run import question_record
from ctxbench.memory.prompts import memgpt as MP
from ctxbench.memory.prompts import readagent as RP
from ctxbench.memory.prompts.scripting import template_key
from ctxbench.metrics.evidence_recall import evidence_recall, markdown, ranked_sessions, record_recall, scores_at

from memory_scripted import BowEmbedder, ScriptedLLM, prompt_text

L2 = math.log2


def test_measures_on_hand_made_rankings():
    assert scores_at(["a", "b", "c"], {"b", "c"}, 1) == {"recall_any": 0.0, "recall_all": 0.0, "ndcg": 0.0}
    s = scores_at(["a", "b", "c"], {"b", "c"}, 3)
    assert s["recall_any"] == 1.0 and s["recall_all"] == 1.0
    assert s["ndcg"] == pytest.approx((1 + 1 / L2(3)) / 2)  # LongMemEval: rank 2 by log2(2) = 1, rank 3 by log2(3)
    s = scores_at(["x", "g1", "y"], {"g1", "g2", "g3"}, 3)  # one of three: any yes, all no
    assert (s["recall_any"], s["recall_all"]) == (1.0, 0.0)
    assert s["ndcg"] == pytest.approx(1 / (2 + 1 / L2(3)))
    assert scores_at(["g"], {"g"}, 10)["ndcg"] == 1.0  # ideal over min(|gold|, k)


def test_ndcg_is_longmemevals_formula():
    """eval_utils.dcg / ndcg transcribed: relevances[0] + sum(relevances[1:] / log2(arange(2, n + 1)))."""
    def theirs(rels, k):
        r = rels[:k]
        return r[0] + sum(x / L2(i) for i, x in zip(range(2, len(r) + 1), r[1:])) if r else 0.0
    for ranked, gold in ((list("abcdefghij"), {"c", "f", "j"}), (list("xyz"), {"y"}), (list("gx2w"), {"g", "2"})):
        for k in (1, 3, 5, 10):
            rels = [1 if x in gold else 0 for x in ranked]
            ideal = theirs(sorted(rels + [1] * (len(gold) - sum(rels)), reverse=True), k)
            assert scores_at(ranked, gold, k)["ndcg"] == pytest.approx(theirs(rels, k) / ideal)


def test_sessions_collapse_at_first_rank_and_k_counts_distinct_sessions():
    retrieved = [{"session": "s1", "turns": ["s1_1"]}, {"session": "s1", "turns": ["s1_2"]},
                 {"session": "s2", "turns": ["s2_1"]}, {"session": None, "turns": []},
                 {"session": "s3", "sessions": ["s3", "s4"], "turns": ["s3_1", "s4_2"]}]
    assert ranked_sessions(retrieved) == ["s1", "s2", "s3", "s4"]
    rec = {"id": "q", "evidence": ["s2_1"], "evidence_sessions": ["s2"], "meta": {"retrieved": retrieved}}
    got = record_recall(rec)
    # s2 is the 2nd distinct session (3rd item): recall@1 0, @3 1; turns: s2_1 is the 3rd distinct turn
    assert got["session"]["recall_any@1"] == 0.0 and got["session"]["recall_any@3"] == 1.0
    assert got["session"]["ndcg@3"] == pytest.approx(1.0)  # rank 2 weighs as rank 1 (LongMemEval)
    assert got["turn"]["recall_any@1"] == 0.0 and got["turn"]["recall_any@3"] == 1.0
    assert got["turn"]["ndcg@5"] == pytest.approx(1 / L2(3))


def test_block_leaves_out_abstention_and_non_retrievers_and_groups_by_category():
    hit = {"meta": {"retrieved": [{"session": "s1", "turns": ["s1_1"]}]}}
    records = [
        {"id": "a", "category_name": "multi-session", "evidence": ["s1_1"], "evidence_sessions": ["s1"], **hit},
        {"id": "b", "category_name": "multi-session", "evidence": ["s9_1"], "evidence_sessions": ["s9"], **hit},
        {"id": "c_abs", "category_name": "multi-session", "evidence_sessions": ["s1"], **hit},  # abstention
        {"id": "d", "category_name": "temporal-reasoning", **hit},  # no evidence
        {"id": "e", "category_name": "temporal-reasoning", "evidence_sessions": ["s1"]},  # retrieved nothing
    ]
    block = evidence_recall(records)
    assert block["n"] == 2 and block["abstention_excluded"] == 1 and block["no_evidence_excluded"] == 1
    assert block["session"]["recall_any@1"] == 0.5 and block["turn"]["n"] == 2
    assert list(block["by_category"]) == ["multi-session"]
    assert "## Evidence recall" in markdown(block)
    assert evidence_recall([{"id": "x", "evidence": ["D1:1"]}]) is None  # full context: no block


def test_locomo_evidence_gives_sessions_in_the_record():
    q = Question("q1", "?", "a", category=1, evidence=["D2:3", "D8:6; D9:17"])
    rec = question_record(q, "conv-1")
    assert rec["evidence_sessions"] == ["session_2", "session_8", "session_9"]
    q = Question("x_abs", "?", "why", category="multi-session", meta={"evidence_sessions": ["s5"], "abstention": True})
    rec = question_record(q, "x_abs")
    assert rec["evidence_sessions"] == ["s5"] and rec["abstention"] is True


# ---- a synthetic haystack: five sessions, distinct topics, one holds the answer --------------------------
TOPICS = [
    ("s_garden", ["I planted tomatoes and basil in my vegetable garden this spring.",
                  "Tomatoes need plenty of sun and regular watering."]),
    ("s_car", ["My car needed new brake pads, so I took it to the mechanic on Monday.",
               "Brake pads usually last about fifty thousand miles."]),
    ("s_pet", ["I adopted a grey cat from the shelter and named her Luna.",
               "Cats like a quiet corner and a scratching post."]),
    ("s_trip", ["Next month I am flying to Lisbon for a conference on databases.",
                "Lisbon is hilly; bring comfortable walking shoes."]),
    ("s_cook", ["I baked sourdough bread with a starter my neighbour gave me.",
                "A sourdough starter needs feeding with flour and water."]),
]


def haystack() -> tuple[History, Question]:
    sessions = [Session(sid, [Turn("user" if i % 2 == 0 else "assistant", text, f"{sid}_{i + 1}")
                              for i, text in enumerate(texts)], f"2023/05/{20 + j:02d} (Sat) 10:00")
                for j, (sid, texts) in enumerate(TOPICS)]
    q = Question("pet_q", "What did I name the cat I adopted?", "Luna", category="single-session-user",
                 category_name="single-session-user", evidence=["s_pet_1"], meta={"evidence_sessions": ["s_pet"]})
    return History("h", sessions, speakers=["user", "assistant"]), q


@pytest.fixture(scope="module")
def minilm():
    return registry.build("embedder", option_config("embedder", {"name": "minilm", "batch_size": 8}))


def test_rag_with_minilm_retrieves_the_evidence_session_first(tmp_path, minilm):
    history, q = haystack()
    cfg = option_config("memory", {"name": "rag", "k": 3, "chunk_size": 2, "overlap": 0, "progress": False})
    rag = registry.get("memory", "rag")(cfg, llm=ScriptedLLM(lambda m, p: "Luna"), embedder=minilm, workdir=tmp_path)
    rag.ingest(history)
    pred = rag.answer(q)
    got = pred.meta["retrieved"]
    assert len(got) == 3 and got[0] == {"session": "s_pet", "turns": ["s_pet_1", "s_pet_2"]}
    rec = {**question_record(q, history.id), "meta": {"retrieved": got}}
    scores = record_recall(rec)
    assert all(scores["session"][f"recall_any@{k}"] == 1.0 for k in (1, 3, 5, 10))
    assert all(scores["session"][f"ndcg@{k}"] == 1.0 for k in (1, 3, 5, 10))
    assert scores["turn"]["recall_all@1"] == 1.0


def test_full_context_prompt_holds_the_evidence_turn_and_retrieves_nothing(tmp_path):
    history, q = haystack()
    llm = ScriptedLLM(lambda m, p: "Luna")
    cfg = option_config("memory", {"name": "full_context"})
    fc = registry.get("memory", "full_context")(cfg, llm=llm, embedder=None, workdir=tmp_path)
    fc.ingest(history)
    pred = fc.answer(q)
    assert "named her Luna" in prompt_text(llm.calls[-1][1])
    assert "retrieved" not in (pred.meta or {})


# ---- provenance from every retrieving memory system --------------------------------------------------
class Scripted(ScriptedChatModel):
    """Valid replies for every prompt; ReadAgent looks up page 0; MemGPT searches the conversation once."""

    def reply(self, messages, phase):
        system, user = messages[0]["content"], messages[-1]["content"]
        if system.startswith(template_key(RP.LOOKUP)):
            return json.dumps({"pages": [0]})
        if system.startswith(template_key(MP.AGENT_SYSTEM)):
            if "RESULT of conversation_search" in user:
                return json.dumps({"function": "send_message", "args": {"message": "Luna"}})
            return json.dumps({"function": "conversation_search", "args": {"query": "cat"}})
        return super().reply(messages, phase)


RETRIEVERS = ["rag", "mem0", "mem0g", "amem", "memgpt", "readagent", "memorybank"]


@pytest.mark.parametrize("name", RETRIEVERS)
def test_each_retrieving_system_returns_provenance(tmp_path, name):
    history, q = haystack()
    conf = {"name": name, "progress": False}
    if name == "readagent":
        conf.update({"max_page_tokens": 40, "min_page_tokens": 20, "tail_tokens": 10})
    cfg = option_config("memory", conf)
    llm = Scripted()
    cls = registry.get("memory", name)
    system = cls(cfg, llm=llm, embedder=BowEmbedder() if cls.needs_embedder else None, workdir=tmp_path)
    system.ingest(history)
    pred = system.answer(q)
    got = pred.meta["retrieved"]
    assert isinstance(got, list) and got, f"{name}: nothing retrieved"
    sessions = {s.id for s in history.sessions}
    turns = {t.id for s in history.sessions for t in s.turns}
    for item in got:
        assert set(item) <= {"session", "sessions", "turns"}
        assert item["session"] is None or item["session"] in sessions
        assert set(item["turns"]) <= turns
    assert any(item["session"] in sessions for item in got), f"{name}: no item names its session"


@pytest.mark.slow  # loads the packaged SmolLM2 (~20 s on 2 cores)
def test_full_context_with_smollm2_answers_from_the_one_evidence_session(tmp_path):
    """The issue's bar on the synthetic haystack: the packaged SmolLM2 reading the whole history answers the
    question whose answer only one session holds."""
    from ctxbench.llm.hf import HFChatLLM
    from ctxbench.qa import get_prompt

    history, q = haystack()
    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "smollm2_135m", "context_window": 1024,
                                          "cache": False, "prefix_cache": False}))
    fc = registry.get("memory", "full_context")(option_config("memory", {"name": "full_context"}), llm=llm,
                                                embedder=None, workdir=tmp_path)
    fc.use_prompt(get_prompt("brief"))
    fc.ingest(history)
    assert "luna" in fc.answer(q).text.lower()


# ---- LongMemEval's question set and gold (src/retrieval/run_retrieval.py) ------------------------------

def _lme_records(retrieve_all: bool = True) -> list[dict]:
    from pathlib import Path

    from ctxbench.data.longmemeval import load_longmemeval_file

    samples = load_longmemeval_file(Path(__file__).resolve().parents[1] / "ctxbench" / "samples" / "longmemeval_sample.json")
    out = []
    for s in samples:
        rec = question_record(s.questions[0], s.history.id)
        rec["meta"] = {"retrieved": [{"session": se.id, "turns": [t.id for t in se.turns]} for se in s.history.sessions]}
        out.append(rec)
    return out


def test_longmemeval_question_set_is_run_retrievals_on_the_shipped_sample():
    """run_retrieval.py skips questions with no user-side has_answer turn (the sample's two
    single-session-assistant questions): 9 questions, not ctxbench's earlier 11."""
    block = evidence_recall(_lme_records())
    assert block["n"] == 9 and block["no_user_evidence_excluded"] == 2 and block["abstention_excluded"] == 2
    assert "single-session-assistant" not in block["by_category"]
    wide = block["all_evidence"]  # ctxbench's wider view, named, beside it
    assert wide["n"] == 11 and wide["by_category"]["single-session-assistant"]["n"] == 2
    assert "All evidence (`all_evidence`" in markdown(block) and "2 without user-side evidence" in markdown(block)


def test_longmemeval_gold_is_user_side_evidence_only():
    """An answer session whose has_answer turn is the assistant's is not gold (run_retrieval.py relabels it
    noans); its assistant turn is not a gold turn either."""
    from ctxbench.data.longmemeval import retrieval_gold

    user_ev = Turn("user", "I ran 5k", "answer_a_1", meta={"has_answer": True})
    asst_ev = Turn("assistant", "Try 10k", "answer_b_2", meta={"has_answer": True})
    slots = [(0, 0, "answer_a", "d", [user_ev, Turn("assistant", "ok", "answer_a_2")]),
             (0, 1, "answer_b", "d", [Turn("user", "hi", "answer_b_1"), asst_ev])]
    gold = retrieval_gold(slots, ["answer_a", "answer_b"])
    assert gold == {"turns": ["answer_a_1"], "sessions": ["answer_a"], "has_target": True}
    rec = {"id": "q", "evidence": ["answer_a_1", "answer_b_2"], "evidence_sessions": ["answer_a", "answer_b"],
           "retrieval_gold": gold, "meta": {"retrieved": [{"session": "answer_b", "turns": ["answer_b_2"]},
                                                          {"session": "answer_a", "turns": ["answer_a_1"]}]}}
    got = record_recall(rec)
    assert got["session"]["recall_any@1"] == 0.0 and got["session"]["recall_all@3"] == 1.0  # answer_b is not gold
    assert record_recall(rec, wide=True)["session"]["recall_any@1"] == 1.0  # ctxbench's wide view counts it
    none = dict(rec, retrieval_gold={"turns": [], "sessions": [], "has_target": False})
    assert record_recall(none) == {}  # left out, as run_retrieval.py's averages skip it
