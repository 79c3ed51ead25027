"""A-Mem retrieval as its LoCoMo evaluation runs it (WujiangXu/A-mem test_advanced.py): the question is
turned into keywords by one LLM call (counted in the answer's usage) and the keywords are embedded as
the query; k per LoCoMo category (the paper's Table 8); and the footprint counts each note's keywords,
context and tags beside its content."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.config.schema import check_types
from ctxbench.core.errors import ConfigError
from ctxbench.memory.amem import AMem
from ctxbench.memory.prompts import amem as P
from ctxbench.core.types import History, Question, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM
from ctxbench.config.compose import option_config

CONF = Path(__file__).resolve().parents[1] / "conf"
TEXTS = ["Caroline went to the LGBTQ support group", "Melanie painted a sunrise over the lake",
         "Caroline researched adoption agencies", "Melanie ran a charity race for mental health",
         "Caroline gave a school speech", "Melanie took her kids camping"]


class RecordingEmbedder(BowEmbedder):
    """BowEmbedder that keeps every text it was asked to embed."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen.extend(texts)
        return super().encode(texts)


def responder(keywords: str | None = '{"keywords": ["support", "group"]}'):
    def respond(messages, phase):
        system, user = messages[0]["content"], messages[-1]["content"]
        if system == P.QUERY_SYSTEM:
            return keywords if keywords is not None else "not json"
        if phase == "answer":
            return "an answer"
        if user.startswith("Message ("):
            body = user.split("says: ", 1)[1].split("\n\nJSON")[0].split()
            return json.dumps({"keywords": body[:2], "context": "about " + " ".join(body[1:4]),
                               "tags": ["life", "events"]})
        if "NEIGHBOURS" in user:  # link every new note to the first neighbour shown
            return json.dumps({"links": ["0"], "neighbors": []})
        raise AssertionError(user)
    return respond


def build(tmp_path, respond=None, embedder=None, **kw) -> tuple[AMem, ScriptedLLM]:
    cfg = option_config("memory", {"name": "amem", "k": 2, "k_neighbors": 1, "expand": 0, "progress": False, **kw})
    llm = ScriptedLLM(respond or responder())
    mem = AMem(cfg, llm=llm, embedder=embedder or BowEmbedder(), workdir=tmp_path)
    mem.ingest(History(id="h", sessions=[Session("s1", [Turn("X", t, f"D1:{i}") for i, t in enumerate(TEXTS)],
                                                 "2:00 pm on 3 July, 2023")]))
    return mem, llm


def shown(pred) -> list[str]:
    return [ln for ln in pred.meta["context"].split("\n") if ln]


def test_question_becomes_keywords_before_retrieval(tmp_path):
    emb = RecordingEmbedder()
    mem, llm = build(tmp_path, embedder=emb, k=1)
    q = Question("q", "What did Melanie do?", "x", category=4)
    pred = mem.answer(q)
    assert emb.seen[-1] == "support, group"          # the keywords are the query, not the question
    assert "support group" in shown(pred)[0]          # ... so the keyword match is retrieved
    query = [m for p, m in llm.calls if m[0]["content"] == P.QUERY_SYSTEM]
    assert len(query) == 1 and "What did Melanie do?" in query[0][-1]["content"]
    # counted in the answer: two calls (keywords, answer), their tokens; construction untouched
    calls = [(p, m) for p, m in llm.calls if p == "answer"]
    assert pred.usage.answer_calls == 2 == len(calls)
    assert pred.usage.answer_prompt_tokens == sum(len(x["content"].split()) for _, m in calls for x in m)
    assert pred.usage.construction_calls == llm.meter.get("construction").calls
    by_kind = pred.outputs["structured_output"]["answer"]["by_kind"]["query"]  # the answer's own
    assert (by_kind["calls"], by_kind["valid"]) == (1, 1)


def test_keywords_off_searches_with_the_question(tmp_path):
    emb = RecordingEmbedder()
    mem, llm = build(tmp_path, embedder=emb, k=1, query_keywords=False)
    pred = mem.answer(Question("q", "What did Melanie do?", "x", category=4))
    assert emb.seen[-1] == "What did Melanie do?" and "Melanie" in shown(pred)[0]
    assert pred.usage.answer_calls == 1 and not any(m[0]["content"] == P.QUERY_SYSTEM for _, m in llm.calls)


def test_no_usable_keywords_falls_back_to_the_question(tmp_path):
    emb = RecordingEmbedder()
    mem, _ = build(tmp_path, responder(keywords=None), embedder=emb, k=1)
    pred = mem.answer(Question("q", "What did Melanie do?", "x", category=4))
    assert emb.seen[-1] == "What did Melanie do?"
    by_kind = pred.outputs["structured_output"]["answer"]["by_kind"]["query"]
    assert by_kind["calls"] == 1 and by_kind["valid"] == 0 and by_kind["invalid"] == 1


def test_k_per_category(tmp_path):
    mem, _ = build(tmp_path, k=2, k_by_category={"temporal": 1, "4": 3, "adversarial": 5})
    for cat, n in [(2, 1), (4, 3), (5, 5), (1, 2), ("open-domain", 2)]:  # ids or names; unnamed: k
        q = Question("q", "Caroline", "x", category=cat)
        assert mem.k_for(q) == n and len(shown(mem.answer(q))) == n, cat


def test_expand_null_adds_linked_notes_up_to_the_questions_k(tmp_path):
    mem, _ = build(tmp_path, k=1, expand=None, k_by_category={"temporal": 2})
    assert len(shown(mem.answer(Question("q", "Caroline", "x", category=4)))) == 2  # 1 + up to 1 linked
    assert len(shown(mem.answer(Question("q", "Caroline", "x", category=2)))) == 4  # 2 + up to 2 linked
    mem0, _ = build(tmp_path / "b", k=1, expand=0)
    assert len(shown(mem0.answer(Question("q", "Caroline", "x", category=4)))) == 1


@pytest.mark.parametrize("bad", [0, -3, "ten", True])
def test_bad_category_k_is_refused(tmp_path, bad):
    with pytest.raises(ConfigError, match=re.escape("config key 'memory.k_by_category.temporal' must be an integer >= 1")):
        build(tmp_path, k_by_category={"temporal": bad})


def test_footprint_counts_keywords_context_and_tags(tmp_path):
    mem, llm = build(tmp_path)
    notes = mem.store.records("h")
    items, tokens = mem.memory_stats()
    content = sum(len(r.text.split()) for r in notes)
    attrs = sum(len(r.meta["context"].split()) + len(", ".join(r.meta["keywords"]).split())
                + len(", ".join(r.meta["tags"]).split()) for r in notes)
    assert items == len(TEXTS) and attrs > 0 and tokens == content + attrs
    pred = mem.answer(Question("q", "Caroline", "x", category=4))
    assert (pred.usage.memory_items, pred.usage.memory_tokens) == (items, tokens)


def test_paper_experiment_uses_keywords_and_table_8_k():
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=["experiment=amem_locomo_table1_amem"])
        paper = compose(config_name="eval", overrides=["experiment=amem_locomo_table1_amem", "scale/amem=paper"])
        default = compose(config_name="eval", overrides=["memory=amem"])
        bad = compose(config_name="eval", overrides=["experiment=amem_locomo_table1_amem",
                                                     "memory.k_by_category.temporal=0"])
    for c in (cfg, paper):
        check_types(c, "eval")
        assert c.memory.query_keywords is True and c.memory.expand is None
        assert dict(c.memory.k_by_category) == {"multi-hop": 40, "temporal": 40, "open-domain": 50,
                                                "single-hop": 50, "adversarial": 40}
        assert {"f1", "f1_set", "f1_adv_answer", "bleu1", "bleu1_adv_answer"} <= set(c.metrics)
    check_types(default, "eval")
    assert default.memory.query_keywords is True and dict(default.memory.k_by_category) == {}
    with pytest.raises(ConfigError, match=re.escape("'memory.k_by_category.temporal' must be >= 1")):
        check_types(bad, "eval")
