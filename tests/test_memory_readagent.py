"""ReadAgent: pagination at the scripted break points (only labels within min/max page size are
offered; an invalid label falls back to the last one and is counted), one gist per page, lookup
reads exactly the chosen pages in full (gists for the rest), invalid page numbers rejected, resume."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.qa import get_prompt
from ctxbench.core import registry
from ctxbench.evaluation.evaluator import run_system
from ctxbench.memory.readagent import ReadAgent, paragraphs_of
from ctxbench.core.types import History, Question, Session, Turn

from scripted_llm import ScriptedLLM
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
WORDS = "apple banana cherry dolphin eagle falcon grape harbor igloo jungle kettle lemon".split()
D1, D2 = "1:00 pm on 1 May, 2023", "2:00 pm on 9 May, 2023"
# paragraph tokens (whitespace words): 12 (dated) 5 5 5 5 5 | 12 (dated) 5 5 5 5 5
PAGES = [(0, 1), (1, 4), (4, 6), (6, 8), (8, 11), (11, 12)]


def history() -> History:
    turns = [Turn("Alice" if i % 2 == 0 else "Bob", f"I like {w} today", f"D{i // 6 + 1}:{i % 6 + 1}")
             for i, w in enumerate(WORDS)]
    return History(id="h", sessions=[Session("s1", turns[:6], D1), Session("s2", turns[6:], D2)],
                   speakers=["Alice", "Bob"])


def cfg(**kw):
    base = {"name": "readagent", "max_page_tokens": 20, "min_page_tokens": 10, "tail_tokens": 0,
            "preceding_tokens": 6, "max_lookups": 2, "progress": False,
            "json_retries": 0}
    return option_config("memory", {**base, **kw})


class Script:
    """Pagination replies from a queue; gists G0, G1, ...; lookup and answer replies settable."""

    def __init__(self, breaks, lookup='{"pages": [1]}', crash_after=None):
        self.breaks, self.lookup, self.crash_after = list(breaks), lookup, crash_after
        self.gists = 0

    def __call__(self, messages, phase, **kw):
        user = messages[-1]["content"]
        if phase == "construction" and user.endswith("JSON:"):
            b = self.breaks.pop(0)
            return json.dumps({"break": b}) if isinstance(b, int) else b
        if phase == "construction":
            if self.crash_after is not None and self.gists == self.crash_after:
                raise KeyboardInterrupt("simulated crash")
            self.gists += 1
            return f"G{self.gists - 1}"
        if "read again" in user:
            return self.lookup
        return "the answer"


def page_texts(m) -> list[str]:
    return [full for full, _, _ in m.pages()]


def test_pagination_at_scripted_breaks_and_gists(tmp_path):
    llm = ScriptedLLM(Script([1, 4, 99, 11]))  # 99 was not offered: invalid, the last label is used
    m = ReadAgent(cfg(), llm=llm, embedder=None, workdir=tmp_path)
    m.ingest(history())
    paras = [p for p, _ in paragraphs_of(history())]
    assert [llm.count_tokens(p) for p in paras] == [12, 5, 5, 5, 5, 5, 12, 5, 5, 5, 5, 5]
    assert page_texts(m) == ["\n".join(paras[a:b]) for a, b in PAGES]
    assert [(r.meta["start"], r.meta["end"]) for r in m.store.records("h", "page")] == PAGES
    assert all(llm.count_tokens(t) <= 20 for t in page_texts(m))
    calls = [c for c in llm.calls if c["messages"][-1]["content"].endswith("JSON:")]
    pag = [c["messages"][-1]["content"] for c in calls]
    breaks = m.output_counts()["structured_output"]["construction"]["by_kind"]["break"]
    assert len(pag) == 4 == m.counts["pagination_calls"] == breaks["calls"] and breaks["invalid"] == 1
    assert [c["schema"]["properties"]["break"]["enum"] for c in calls] == [[1, 2], [3, 4, 5], [7, 8], [10, 11, 12]]
    # offered labels: only where the page would hold >= min_page_tokens, plus the last one
    assert [re.findall(r"<(\d+)>", p) for p in pag] == [["1", "2"], ["3", "4", "5"], ["7", "8"], ["10", "11", "12"]]
    assert "Bob: I like banana today" in pag[1].split("<3>")[0]  # the page's own start, unlabelled
    assert pag[1].startswith("Passage:\n\n...\nAlice: I like apple today")  # tail of the previous page
    assert "Alice: I like igloo today\n..." in pag[2]  # the following paragraph after the last label
    # one gist per page, in page order, with the page's date
    assert [(g, d) for _, g, d in m.pages()] == [(f"G{k}", D1 if k < 3 else D2) for k in range(6)]
    assert llm.meter.get("construction").calls == 4 + 6 and llm.meter.get("answer").calls == 0
    assert paras[6].startswith(f"DATE: {D2}\n")


def test_lookup_reads_exactly_the_chosen_pages(tmp_path):
    script = Script([1, 4, 8, 11], lookup='{"pages": [4, 1]}')
    llm = ScriptedLLM(script)
    m = ReadAgent(cfg(), llm=llm, embedder=None, workdir=tmp_path)
    m.use_prompt(get_prompt("locomo"))  # "Short answer" below is LoCoMo's prompt
    m.ingest(history())
    pages = m.pages()
    n0 = len(llm.calls)
    pred = m.answer(Question("q", "When did Bob mention the eagle?", "1 May", category_name="temporal"))
    lookup_msgs, answer_msgs = llm.calls[n0]["messages"], llm.calls[n0 + 1]["messages"]
    assert len(llm.calls) == n0 + 2 and pred.text == "the answer"
    look = lookup_msgs[-1]["content"]
    assert all(f"<Page {k}> ({d})\nG{k}" in look for k, (_, _, d) in enumerate(pages))  # all gists ...
    assert "I like" not in look  # ... and no full page
    assert "Use DATE of CONVERSATION" in look  # the question as the QA prompt forms it
    ans = answer_msgs[-1]["content"]
    for k, (full, gist, d) in enumerate(pages):
        if k in (1, 4):
            assert f"<Page {k}> ({d})\n{full}" in ans and f"\nG{k}\n" not in ans + "\n"
        else:
            assert f"<Page {k}> ({d})\nG{k}" in ans and full not in ans
    assert "Short answer" in ans  # the shared QA prompt
    assert pred.meta["looked_up"] == [1, 4] and pred.usage.extra["asked_pages"] == [4, 1]
    schema = llm.calls[n0]["schema"]["properties"]["pages"]
    assert schema["items"]["enum"] == list(range(len(pages))) and schema["maxItems"] == 2  # only real pages
    assert pred.usage.answer_calls == 2 and pred.usage.construction_calls == 10
    assert pred.usage.held_text == llm.count_tokens(pred.meta["context"])
    # more pages than max_lookups, or a page that does not exist: not a valid lookup (counted), none read
    for bad in ('{"pages": [5, 0, 2]}', '{"pages": [9]}'):
        script.lookup = bad
        pred = m.answer(Question("q2", "What fruit?", "apple", category_name="single-hop"))
        assert pred.meta["looked_up"] == [] and pred.usage.extra["lookup_unparsed"] == 1
        # counted in the answer's own outputs, not the history's (answers may run side by side)
        assert pred.outputs["structured_output"]["answer"]["by_kind"]["lookup"]["invalid"] == 1
    assert "answer" not in m.output_counts()["structured_output"]
    script.lookup = "I do not need to look anything up"
    pred = m.answer(Question("q3", "What fruit?", "apple", category_name="single-hop"))
    assert pred.meta["looked_up"] == [] and pred.usage.extra["lookup_unparsed"] == 1
    assert all(f"G{k}" in pred.meta["context"] for k in range(6))


def test_memory_over_the_window_drops_oldest_gists(tmp_path):
    """Gists that do not fit the window: the oldest are dropped (counted), looked-up pages kept."""
    def respond(messages, phase, **kw):
        user = messages[-1]["content"]
        if user.endswith("JSON:"):
            return json.dumps({"break": int(re.findall(r"<(\d+)>", user)[-1])})
        if phase == "construction":
            return "gist " + "filler " * 30 + user.split("Passage:\n")[1].split()[0]
        return '{"pages": [0]}' if "read again" in user else "ok"
    window = 260
    llm = ScriptedLLM(respond, context_window=window)
    m = ReadAgent(cfg(), llm=llm, embedder=None, workdir=tmp_path)
    m.ingest(history())
    n = len(m.pages())
    pred = m.answer(Question("q", "What fruit?", "apple", category_name="single-hop"))
    look, ans = llm.calls[-2], llm.calls[-1]
    for c in (look, ans):
        assert sum(llm.count_tokens(x["content"]) for x in c["messages"]) + c["max_new_tokens"] <= window
    assert pred.usage.extra["lookup_dropped_gists"] > 0
    shown = look["messages"][-1]["content"].count("<Page ")
    assert shown == n - pred.usage.extra["lookup_dropped_gists"] >= 1
    assert ans["messages"][-1]["content"].count("<Page ") == n - pred.usage.extra["dropped_gists"]
    assert f"<Page {n - 1}>" in look["messages"][-1]["content"]  # the newest gist is kept ...
    assert "<Page 0>" not in look["messages"][-1]["content"]  # ... the oldest dropped
    assert pred.meta["looked_up"] == [0] and m.pages()[0][0] in ans["messages"][-1]["content"]


def test_resume_after_crash(tmp_path):
    llm = ScriptedLLM(Script([1, 4, 8, 11], crash_after=3))
    m = ReadAgent(cfg(), llm=llm, embedder=None, workdir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        m.ingest(history())
    m.close()  # the interrupted step was not committed
    llm2 = ScriptedLLM(Script([8, 11]))
    m2 = ReadAgent(cfg(), llm=llm2, embedder=None, workdir=tmp_path)
    m2.ingest(history())
    assert [(r.meta["start"], r.meta["end"]) for r in m2.store.records("h", "page")] == PAGES
    assert [g for _, g, _ in m2.pages()] == ["G0", "G1", "G2", "G0", "G1", "G2"]  # 3 before, 3 after
    assert llm2.meter.get("construction").calls == 2 + 3  # only the pages not committed before
    m2.close()
    llm3 = ScriptedLLM(Script([]))
    ReadAgent(cfg(), llm=llm3, embedder=None, workdir=tmp_path).ingest(history())
    assert llm3.calls == []


def test_config(tmp_path):
    with pytest.raises(ValueError, match="min_page_tokens"):
        ReadAgent(cfg(min_page_tokens=30), llm=ScriptedLLM("x"), embedder=None, workdir=tmp_path)


def test_locomo_through_evaluator(tmp_path):
    """conf/memory/readagent.yaml through the registry and the one evaluator on real conv-26 (1 session)."""
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    samples = registry.build("dataset", option_config("dataset",
        {"name": "locomo", "path": str(DATA), "conversations": ["conv-26"], "limit": 2}))
    c = load_conf_file(ROOT / "conf" / "memory" / "readagent.yaml")
    c.max_sessions, c.progress = 1, False
    assert not registry.get("memory", c.name).needs_embedder

    def respond(messages, phase, **kw):
        user = messages[-1]["content"]
        if user.endswith("JSON:"):
            return json.dumps({"break": int(re.findall(r"<(\d+)>", user)[0])})
        if phase == "construction":
            return "They talked."
        return '{"pages": [0]}' if "read again" in user else "Not mentioned in the conversation"
    llm = ScriptedLLM(respond, context_window=2048)
    system = registry.build("memory", c, llm=llm, embedder=None, workdir=tmp_path)
    recs = run_system(system, samples, tmp_path, llm=llm, progress=False)
    assert len(recs) == 2
    u = recs[0]["usage"]
    assert u["answer_calls"] == 2 and u["construction_calls"] > 2 and u["extra"]["looked_up"] == [0]
    assert u["memory_items"] == 2 * u["extra"]["pages"]
    assert recs[0]["outputs"]["invalid_outputs"] == 0 and recs[0]["outputs"]["structured_calls"] > 0
    assert recs[0]["construction"]["outputs"]["counts"]["pagination_calls"] > 0  # the history's, once
    assert recs[0]["construction"]["calls"] == llm.meter.get("construction").calls


@pytest.mark.slow
def test_eval_cli_packaged_model(tmp_path):
    """``python -m ctxbench eval memory=readagent`` with the packaged SmolLM2-135M on LoCoMo conv-26
    (first session, 3 questions); a rerun resumes."""
    import json
    import os
    import subprocess
    import sys
    if not DATA.exists():
        pytest.skip(f"no {DATA}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled",
               CTXBENCH_CACHE=os.environ.get("CTXBENCH_CACHE", str(tmp_path / "cache")))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ctxbench", "eval", "memory=readagent", "dataset=locomo",
           f"dataset.path={DATA}", "dataset.conversations=[conv-26]", "dataset.limit=3",
           "memory.max_sessions=1", "progress=false", f"hydra.run.dir={out}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3
    for r in preds:
        u = r["usage"]
        assert u["answer_calls"] == 2 and len(u["extra"]["looked_up"]) <= 2
        assert u["memory_items"] == 2 * u["extra"]["pages"] >= 2
    c = preds[0]["construction"]
    assert c["calls"] == preds[0]["usage"]["extra"]["pages"] + c["outputs"]["counts"]["pagination_calls"]
    p2 = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 3
