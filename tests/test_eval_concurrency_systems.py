"""Every registered system writes the same records at ``concurrency=4`` as at ``concurrency=1``
(answers, usage, extras, meta, output counts; timings aside), and ``run_system`` returns records in
dataset order whatever order the answers complete in.

The backend is the bench's scripted chat model (valid replies beside each system's prompts), made
thread-safe and slow enough for calls to overlap, with two replies that depend on the question so a
per-answer state kept on the shared instance shows: ReadAgent looks up the page numbered after the
question, and MemGPT notes the question in its working context before answering with that context.
Every reply depends on the prompt alone.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.check.harness import untimed  # the records without wall times, as `check` compares them
from ctxbench.config.schemas import load_conf_file
from ctxbench.core import registry
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage
from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.llm.shared import SharedLLM
from ctxbench.memory.prompts import memgpt as MP
from ctxbench.memory.prompts import readagent as RP
from ctxbench.memory.prompts.scripting import template_key

from http_memory import with_remote
from memory_scripted import BowEmbedder

ROOT = Path(__file__).resolve().parents[1]
# small pages, so ReadAgent's history has several to look up
SETTINGS = {"readagent": {"max_page_tokens": 40, "min_page_tokens": 20, "tail_tokens": 10}}
CASES = [(n, SETTINGS.get(n, {})) for n in registry.names("memory")] + [("memgpt", {"persist_core_edits": False})]


class SlowScripted(ScriptedChatModel):
    """The bench's scripted model, one call at a time per reply but ``delay`` s each, so calls overlap."""

    def __init__(self, delay: float = 0.004) -> None:
        super().__init__()
        self.delay = delay
        self._lock = threading.Lock()

    def reply(self, messages: list[dict[str, str]], phase: str) -> str:
        time.sleep(self.delay)
        system, user = messages[0]["content"], messages[-1]["content"]
        asked = re.search(r"question (\d+)", user)
        if system.startswith(template_key(RP.LOOKUP)) and asked:  # the page numbered after the question
            return json.dumps({"pages": [int(asked.group(1)) % max(1, user.count("<Page "))]})
        if system.startswith(template_key(MP.AGENT_SYSTEM)):
            return memgpt_step(user)
        with self._lock:
            return super().reply(messages, phase)


def memgpt_step(user: str) -> str:
    """Note the question in the working context, then answer with the notes the edit's result shows."""
    if "RESULT of core_memory_append" in user:
        working = user.split("Working context:", 1)[-1].split("\n\n")[0]
        notes = [line.strip() for line in working.splitlines() if line.strip().startswith("noted")]
        return json.dumps({"function": "send_message", "args": {"message": "; ".join(notes)}})
    asked = re.search(r"QUESTION: question (\d+)", user)
    return json.dumps({"function": "core_memory_append",
                       "args": {"content": f"noted question {asked.group(1) if asked else '?'}"}})


def samples(n_hist: int = 2, n_q: int = 5) -> list[Sample]:
    out = []
    for h in range(n_hist):
        sessions = [Session(f"s{s}", [Turn("Ann" if t % 2 else "Bob",
                                           f"In history {h} Bob told Ann about trip {s} day {t} to Paris and Rome",
                                           f"D{s}:{t}") for t in range(4)], f"{s + 1} May 2023")
                    for s in range(3)]
        qs = [Question(f"h{h}q{i}", f"question {i}: where did Bob go on trip {i % 3}?", "Paris", category=1 + i % 5)
              for i in range(n_q)]
        out.append(Sample(History(f"h{h}", sessions, speakers=["Bob", "Ann"]), qs))
    return out


def run(name: str, settings: dict[str, Any], out: Path, concurrency: int) -> list[dict[str, Any]]:
    cfg = with_remote(name, load_conf_file(ROOT / "conf" / "memory" / f"{name}.yaml"))
    for key, value in {**settings, "progress": False}.items():
        if key in cfg:
            cfg[key] = value
    llm = SharedLLM(SlowScripted())
    embedder = BowEmbedder() if registry.get("memory", cfg.name).needs_embedder else None
    systems = HistorySystems(lambda hid: registry.build("memory", cfg, llm=llm, embedder=embedder,
                                                       workdir=out / "stores" / hid))
    records = run_system(systems, samples(), out, llm=llm, progress=False, concurrency=concurrency)
    assert not llm.inner.unknown, dict(llm.inner.unknown)
    return records


@pytest.mark.parametrize("name,settings", CASES, ids=[n + ("-no-persist" if s.get("persist_core_edits") is False
                                                           else "") for n, s in CASES])
def test_concurrent_records_equal_sequential_ones(name, settings, tmp_path):
    one = untimed(run(name, settings, tmp_path / "c1", 1))
    four = untimed(run(name, settings, tmp_path / "c4", 4))
    assert [r["id"] for r in four] == [r["id"] for r in one]
    for a, b in zip(one, four):
        assert b == a, f"memory={name} {settings}: record {a['id']} differs at concurrency 4"
    if name == "readagent":  # each question looked up its own page
        assert [r["meta"]["looked_up"] for r in one[:4]] == [[0], [1], [2], [3]]
    if name == "memgpt" and settings:  # an edit lasts for its own question only
        assert [r["raw_prediction"] for r in one] == [f"noted question {i}" for i in range(5)] * 2


# ---- dataset order, whatever order the answers complete in --------------------------------------------

class Reversed(System):
    """Question i of a history waits until question i+1 has been answered: answers complete last to first."""

    n_questions = 4

    def __init__(self, llm: Any, done: "Done") -> None:
        self.llm, self.done = llm, done
        self.completed: list[str] = []

    def ingest(self, history: History) -> None:
        pass

    def answer(self, question: Question) -> Prediction:
        hid, i = question.id.rsplit("q", 1)
        if int(i) + 1 < self.n_questions:  # an LLM call: the workers' lock is released while it waits
            self.llm.chat([{"role": "user", "content": f"after {hid}q{int(i) + 1}"}])
        self.completed.append(question.id)
        self.done.event(question.id).set()
        return Prediction(f"answer {question.id}", Usage())


class Done:
    """One event per question id, set once it is answered."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, qid: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(qid, threading.Event())


class WaitingLLM(SlowScripted):
    """Replies to "after <question id>" once that question has been answered."""

    def __init__(self, done: Done) -> None:
        super().__init__(delay=0.0)
        self.done = done

    def reply(self, messages: list[dict[str, str]], phase: str) -> str:
        text = messages[-1]["content"]
        if text.startswith("after "):
            assert self.done.event(text.split()[1]).wait(10), f"{text}: never answered"
        return "ok"


def test_records_come_back_in_dataset_order_when_answers_complete_in_reverse(tmp_path):
    done = Done()
    llm = SharedLLM(WaitingLLM(done))
    system = Reversed(llm, done)
    data = samples(2, Reversed.n_questions)
    records = run_system(HistorySystems(lambda hid: system), data, tmp_path, llm=llm, progress=False,
                         concurrency=Reversed.n_questions)
    order = [q.id for s in data for q in s.questions]
    first = [q for q in system.completed if q.startswith("h0")]
    assert first == ["h0q3", "h0q2", "h0q1", "h0q0"]  # they did complete in reverse
    assert [r["id"] for r in records] == order
    written = [json.loads(x)["id"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [q for q in written if q.startswith("h0")] == first  # appended as they completed
    assert [r["prediction"] for r in records] == [f"answer {q}" for q in order]
