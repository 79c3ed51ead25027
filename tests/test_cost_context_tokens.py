"""Cost accounting is the same rule in every system: an answer's ``held_text`` counts the history
or memory text shown to the answering model, and nothing else (not the answer prompt's instructions,
the question or the speakers' introduction); ``no_context`` shows none. ReadAgent's footprint counts
its gists beside its pages. Checked through the evaluator (``run_system`` → ``aggregate_cost``) with a
scripted LLM that counts whitespace words, under each answer prompt.

The expected context is built here from the history (the shared renderer, the chunker, the scripted
gists), never read back from what the system reports; each is checked to appear verbatim in the
answer call, and the call to hold more than it (the instructions are there, just not counted).
"""
from __future__ import annotations

import json
import re

import pytest
from omegaconf import OmegaConf

from ctxbench.evaluation.evaluator import run_system
from ctxbench.memory.baselines import FullContext, NoContext
from ctxbench.memory.rag import RAG, chunk_turns
from ctxbench.memory.readagent import ReadAgent, paragraphs_of
from ctxbench.metrics.cost import aggregate_cost
from ctxbench.qa import get_prompt
from ctxbench.core.render import render_history
from ctxbench.core.types import History, Question, Sample, Session, Turn

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM
from ctxbench.config.compose import option_config

WORDS = "apple banana cherry dolphin eagle falcon grape harbor igloo jungle kettle lemon".split()
D1, D2 = "1:00 pm on 1 May, 2023", "2:00 pm on 9 May, 2023"
QUESTIONS = [Question("q1", "Which fruit did Alice like?", "apple", category=4),
             Question("q2", "When did Bob mention the eagle?", "1 May 2023", category=2)]
PROMPTS = ["locomo", "mem0", "amem"]


def history() -> History:
    turns = [Turn("Alice" if i % 2 == 0 else "Bob", f"I like {w} today", f"D{i // 6 + 1}:{i % 6 + 1}")
             for i, w in enumerate(WORDS)]
    return History(id="h", sessions=[Session("s1", turns[:6], D1), Session("s2", turns[6:], D2)],
                   speakers=["Alice", "Bob"])


def respond(messages, **kw) -> str:
    user = messages[-1]["content"]
    if user.endswith("JSON:"):  # ReadAgent pagination: the last label offered
        return json.dumps({"break": int(re.findall(r"<(\d+)>", user)[-1])})
    if kw.get("phase") == "construction":  # ReadAgent gists: "gist of <the page's first liked thing>"
        return "gist of " + re.search(r"like (\w+)", user).group(1)
    if "read again" in user:  # ReadAgent lookup: page 1 in full
        return '{"pages": [1]}'
    return "the answer"


def evaluate(system, llm, prompt: str, tmp_path):
    system.use_prompt(get_prompt(prompt))
    recs = run_system(system, [Sample(history(), list(QUESTIONS))], tmp_path / "run", llm=llm, progress=False)
    answers = [c for c in llm.calls if c["phase"] == "answer" and "read again" not in c["messages"][-1]["content"]]
    assert len(recs) == len(answers) == 2
    return recs, answers


def call_text(call) -> str:
    return "\n".join(m["content"] for m in call["messages"])


def check(llm, recs, answers, shown: list[list[str]]):
    """Every answer shows exactly the ``shown`` pieces, and counts their tokens alone."""
    for rec, call, pieces in zip(recs, answers, shown):
        text = call_text(call)
        for piece in pieces:
            assert piece in text, piece[:60]
        want = sum(llm.count_tokens(p) for p in pieces)
        assert rec["usage"]["held_text"] == want and rec["usage"]["held_kv_slots"] == rec["usage"]["held_soft_slots"] == 0
        rest = llm.count_tokens(_without(text, pieces))  # instructions, question, introduction
        assert rest > 0 and rec["usage"]["answer_prompt_tokens"] >= want + rest - len(pieces)  # shown, not counted
    held = aggregate_cost(recs)["held_per_question"]
    assert held["text"] == held["total"] == pytest.approx(sum(r["usage"]["held_text"] for r in recs) / len(recs))


def _without(text: str, pieces: list[str]) -> str:
    for p in pieces:
        text = text.replace(p, " ", 1)
    return text


@pytest.mark.parametrize("prompt", PROMPTS)
def test_full_context_counts_the_rendered_history_alone(tmp_path, prompt):
    llm = ScriptedLLM(respond)
    recs, answers = evaluate(FullContext(option_config("memory", {"name": "full_context"}), llm=llm), llm, prompt, tmp_path)
    rendered = render_history(history(), "locomo").strip()
    check(llm, recs, answers, [[rendered]] * 2)
    intro = "Below is a conversation between two people: Alice and Bob."
    if prompt == "locomo":  # LoCoMo's speaker introduction is shown, and not counted as history
        assert intro in call_text(answers[0]) and intro not in rendered


@pytest.mark.parametrize("prompt", PROMPTS)
def test_no_context_counts_nothing(tmp_path, prompt):
    llm = ScriptedLLM(respond)
    recs, answers = evaluate(NoContext(option_config("memory", {"name": "no_context"}), llm=llm), llm, prompt, tmp_path)
    assert [r["usage"]["held_text"] for r in recs] == [0, 0]
    assert all("I like" not in call_text(c) for c in answers)
    assert all(r["usage"]["answer_prompt_tokens"] > 0 for r in recs)
    assert aggregate_cost(recs)["held_per_question"]["total"] == 0


@pytest.mark.parametrize("prompt", PROMPTS)
def test_rag_counts_the_retrieved_chunks_alone(tmp_path, prompt):
    llm = ScriptedLLM(respond)
    cfg = option_config("memory", {"name": "rag", "k": 50, "chunk_size": 2, "overlap": 0, "progress": False})
    rag = RAG(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path / "rag")
    recs, answers = evaluate(rag, llm, prompt, tmp_path)
    chunks = [text for s in history().sessions for text, _ in chunk_turns(s, 2, 0)]  # k >= chunks: all shown
    assert len(chunks) == 6
    check(llm, recs, answers, [chunks] * 2)
    u = recs[0]["usage"]
    assert (u["memory_items"], u["memory_tokens"]) == (6, sum(llm.count_tokens(c) for c in chunks))
    search = aggregate_cost(recs)["latency_s"]["search"]
    assert search["n"] == 2 and 0 <= search["p50"] <= aggregate_cost(recs)["latency_s"]["answer"]["p95"]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_readagent_counts_its_gist_memory_alone_and_holds_its_gists(tmp_path, prompt):
    llm = ScriptedLLM(respond)
    cfg = option_config("memory", {"name": "readagent", "max_page_tokens": 20, "min_page_tokens": 10, "tail_tokens": 0,
                            "preceding_tokens": 6, "max_lookups": 2, "progress": False, "json_retries": 0})
    ra = ReadAgent(cfg, llm=llm, embedder=None, workdir=tmp_path / "ra")
    recs, answers = evaluate(ra, llm, prompt, tmp_path)
    # the pages the scripted pagination makes (always the last label offered: paragraphs of 12 and 5
    # words within 10..20 words a page), built from the paragraphs
    paras = paragraphs_of(history())
    pages, start = [], 0
    for end in (2, 6, 8, 12):
        text = "\n".join(p for p, _ in paras[start:end])
        pages.append((text, "gist of " + re.search(r"like (\w+)", text).group(1), paras[start][1]))
        start = end
    assert [full for full, _, _ in ra.pages()] == [full for full, _, _ in pages]
    blocks = [f"<Page {i}> ({d})\n{full if i == 1 else gist}" for i, (full, gist, d) in enumerate(pages)]
    check(llm, recs, answers, [blocks] * 2)
    u = recs[0]["usage"]
    held = [full for full, _, _ in pages] + [gist for _, gist, _ in pages]
    assert u["memory_items"] == 8 and u["memory_tokens"] == sum(llm.count_tokens(t) for t in held)
