"""Concurrent evaluation (ctxbench/evaluation/pool.py): histories and questions on N workers, the same records.

A slow, thread-safe scripted backend answers from the messages alone (so the reply cannot depend on
completion order) and records how many calls were in flight at once.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from omegaconf import OmegaConf

from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.llm.base import ChatResult, UsageMeter
from ctxbench.llm.shared import SharedLLM
from ctxbench.memory.baselines import FullContext
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage
from ctxbench.config.compose import option_config

TIMING = ("answer_seconds", "usage.answer_seconds", "construction.seconds")


class SlowLLM:
    """Replies "echo <last 3 words of the last message>" after ``delay`` s; counts peak in-flight calls."""

    def __init__(self, delay: float = 0.03, concurrency: int = 4):
        self.delay, self.concurrency = delay, concurrency
        self.meter = UsageMeter()
        self.model_name = "slow"
        self.in_flight = self.peak = self.n = 0
        self._lock = threading.Lock()

    @property
    def context_window(self) -> int:
        return 4096

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages, *, max_new_tokens=64, temperature=0.0, phase="answer", json_mode=False,
             schema=None, seed=None, stop=None) -> ChatResult:
        with self._lock:
            self.in_flight += 1
            self.n += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
        words = messages[-1]["content"].split()
        r = ChatResult("echo " + " ".join(words[-3:]), sum(len(m["content"].split()) for m in messages), 4)
        self.meter.add(phase, r)
        return r


def samples(n_hist: int = 3, n_q: int = 5) -> list[Sample]:
    out = []
    for h in range(n_hist):
        turns = [Turn("Ann" if t % 2 else "Bob", f"history {h} session {s} turn {t} text", f"D{s}:{t}")
                 for s in range(2) for t in range(3)]
        sessions = [Session(f"s{s}", [t for t in turns if t.id.startswith(f"D{s}:")], f"{s + 1} May 2023")
                    for s in range(2)]
        qs = [Question(f"h{h}q{i}", f"what did person {i} of history {h} say", f"answer {i}", category=1)
              for i in range(n_q)]
        out.append(Sample(History(f"h{h}", sessions, speakers=["Bob", "Ann"]), qs))
    return out


def full_context(llm: Any) -> HistorySystems:
    cfg = option_config("memory", {"name": "full_context", "reserve": 96})
    return HistorySystems(lambda hid: FullContext(cfg, llm=llm))


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without wall-clock fields."""
    out = []
    for r in records:
        r = json.loads(json.dumps(r))
        r.pop("answer_seconds", None)
        r.pop("lock_wait_seconds", None)
        r["usage"].pop("answer_seconds", None)
        r["usage"].pop("ingest_seconds", None)
        r["construction"].pop("seconds", None)
        out.append(r)
    return out


def test_concurrent_run_writes_the_sequential_records_with_calls_in_parallel(tmp_path):
    seq_llm = SharedLLM(SlowLLM())
    seq = run_system(full_context(seq_llm), samples(), tmp_path / "seq", llm=seq_llm, progress=False)
    assert seq_llm.inner.peak == 1
    par_llm = SharedLLM(SlowLLM())
    par = run_system(full_context(par_llm), samples(), tmp_path / "par", llm=par_llm, progress=False, concurrency=4)
    assert par_llm.inner.peak == 4  # four calls in flight at once, never more
    assert [r["id"] for r in par] == [r["id"] for r in seq]  # dataset order, whatever the completion order
    assert comparable(par) == comparable(seq)  # same answers, same per-answer token and call counts
    assert all(r["usage"]["answer_calls"] == 1 and r["usage"]["answer_prompt_tokens"] > 0 for r in par)
    written = [json.loads(x)["id"] for x in (tmp_path / "par" / "predictions.jsonl").read_text().splitlines()]
    assert sorted(written) == sorted(r["id"] for r in seq)  # each once, appended as they completed


class Probe(System):
    """Records overlaps of its own code and the order of its answers."""

    log: list[tuple[str, str]] = []
    busy = threading.Lock()

    def __init__(self, llm: Any, writes: bool):
        self.llm, self.hid = llm, None
        self.answer_writes_state = writes

    def ingest(self, history: History) -> None:
        self._enter("ingest", history.id)
        self.llm.chat([{"role": "user", "content": f"build {history.id}"}], phase="construction")
        self._enter("ingest2", history.id)
        self.hid = history.id

    def answer(self, question: Question) -> Prediction:
        self._enter("answer", question.id)
        r = self.llm.chat([{"role": "user", "content": question.question}])
        self._enter("answered", question.id)
        return Prediction(r.text, Usage())

    def _enter(self, what: str, key: str) -> None:
        # system code never runs on two workers at once: the busy lock is always free here
        assert self.busy.acquire(blocking=False), f"system code overlapped at {what} {key}"
        Probe.log.append((what, key))
        time.sleep(0.002)
        self.busy.release()


@pytest.mark.parametrize("writes", [False, True])
def test_system_code_never_overlaps_and_state_writers_answer_in_order(tmp_path, writes):
    Probe.log = []
    llm = SharedLLM(SlowLLM(delay=0.02))
    systems = HistorySystems(lambda hid: Probe(llm, writes))
    records = run_system(systems, samples(3, 6), tmp_path, llm=llm, progress=False, concurrency=4)
    assert len(records) == 18
    assert llm.inner.peak > 1  # the calls did overlap
    for h in range(3):
        started = [k for what, k in Probe.log if what == "answer" and k.startswith(f"h{h}q")]
        ended = [k for what, k in Probe.log if what == "answered" and k.startswith(f"h{h}q")]
        if writes:  # one at a time, in dataset order: each answer ends before the next starts
            assert started == ended == [f"h{h}q{i}" for i in range(6)]
            mine = [(w, k) for w, k in Probe.log if k.startswith(f"h{h}q")]
            assert all(mine[2 * i][0] == "answer" and mine[2 * i + 1][0] == "answered" for i in range(6))
        else:
            assert sorted(started) == [f"h{h}q{i}" for i in range(6)]
    if not writes:  # some history had two answers waiting on the backend at once
        depth, peak = {}, 0
        for what, k in Probe.log:
            h = k[:2]
            depth[h] = depth.get(h, 0) + (1 if what == "answer" else -1 if what == "answered" else 0)
            peak = max(peak, depth[h])
        assert peak > 1


def test_a_failing_task_stops_the_run_and_raises(tmp_path):
    llm = SharedLLM(SlowLLM(delay=0.01))

    class Boom(Probe):
        def answer(self, question: Question) -> Prediction:
            if question.id == "h1q2":
                raise RuntimeError("boom at h1q2")
            return Prediction("x", Usage())

    Probe.log = []
    systems = HistorySystems(lambda hid: Boom(llm, False))
    with pytest.raises(RuntimeError, match="boom at h1q2"):
        run_system(systems, samples(3, 4), tmp_path, llm=llm, progress=False, concurrency=3)
    done = [json.loads(x)["id"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert "h1q2" not in done and len(done) == len(set(done))
    again = run_system(HistorySystems(lambda hid: Probe(llm, False)), samples(3, 4), tmp_path,
                       llm=llm, progress=False, concurrency=3)  # the rerun answers the rest, nothing twice
    lines = [json.loads(x)["id"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(again) == 12 and sorted(lines) == sorted(r["id"] for r in again)


def test_construction_cost_is_each_historys_own_under_concurrency(tmp_path):
    llm = SharedLLM(SlowLLM(delay=0.02))
    Probe.log = []
    systems = HistorySystems(lambda hid: Probe(llm, False))
    records = run_system(systems, samples(4, 2), tmp_path, llm=llm, progress=False, concurrency=4)
    for r in records:  # one "build <id>" call per history, counted for that history only
        assert r["construction"]["calls"] == 1
        assert r["construction"]["prompt_tokens"] == 2
        assert r["usage"]["answer_calls"] == 1
    assert llm.meter.total("construction").calls == 4 and llm.meter.total("answer").calls == 8


def test_hf_calls_from_several_workers_are_generated_as_one_batch(tmp_path):
    from ctxbench.llm.hf import HFChatLLM

    def tiny(batch_size: int) -> SharedLLM:
        return SharedLLM(HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 1024, "prefix_cache": False,
                                                     "batch_size": batch_size})))

    one = tiny(1)
    seq = run_system(full_context(one), samples(2, 4), tmp_path / "seq", llm=one, progress=False)
    many = tiny(4)
    par = run_system(full_context(many), samples(2, 4), tmp_path / "par", llm=many, progress=False, concurrency=4)
    assert many.batcher is None  # served only while the run lasts
    assert max(many.batch_sizes) > 1 and sum(many.batch_sizes) == 8  # the 8 answers, in batches
    assert [r["raw_prediction"] for r in par] == [r["raw_prediction"] for r in seq]  # greedy: the same replies
    assert all(r["usage"]["held_text"] > 0 for r in par)  # the history was shown
    assert comparable(par) == comparable(seq)


def test_batcher_groups_calls_and_counts_each_in_its_callers_task(tmp_path):
    from ctxbench.evaluation.pool import Gate, HistoryWork, run_tasks
    from ctxbench.llm.scope import call_scope
    from ctxbench.llm.shared import CallBatcher

    class BatchLLM(SlowLLM):
        batch_size = 3

        def chat_batch(self, batch, **kw):
            self.batches = getattr(self, "batches", []) + [len(batch)]
            return [self.chat(m, **kw) for m in batch]

    inner = BatchLLM(delay=0.0)
    llm = SharedLLM(inner)
    gate = Gate()
    llm.serve(gate, batch=True)
    assert isinstance(llm.batcher, CallBatcher)
    seen: dict[str, tuple[int, int]] = {}

    def task(name: str):
        def run() -> None:
            with call_scope() as scope:
                llm.chat([{"role": "user", "content": f"one two {name}"}])
                c = scope.counts[(id(inner.meter), "answer")]
                seen[name] = (c.calls, c.prompt_tokens)
        return run

    histories = [HistoryWork(ingest=lambda: None, answers=[task(f"t{i}{j}") for j in range(3)])
                 for i in range(2)]
    run_tasks(histories, workers=3, gate=gate)
    llm.serve(None, batch=False)
    assert sum(inner.batches) == 6 and max(inner.batches) > 1
    assert seen == {f"t{i}{j}": (1, 3) for i in range(2) for j in range(3)}  # each task counts only its call


def test_log_samples_writes_each_answers_calls_context_and_construction_calls(tmp_path, monkeypatch):
    from ctxbench.evaluation.sample_log import CONSTRUCTION_CALLS, SAMPLES

    secret = "s3cr3t-value-of-the-key-0042"
    monkeypatch.setenv("MY_SERVICE_API_KEY", secret)
    llm = SharedLLM(SlowLLM(delay=0.0))
    data = samples(2, 2)
    data[0].history.sessions[0].turns[0] = Turn("Bob", f"my key is {secret}", "D0:0")
    records = run_system(full_context(llm), data, tmp_path, llm=llm, progress=False, log_samples=True)
    lines = [json.loads(x) for x in (tmp_path / SAMPLES).read_text().splitlines()]
    assert [x["id"] for x in lines] == [r["id"] for r in records]
    first, rec = lines[0], records[0]
    assert first["prediction"] == rec["prediction"] and first["raw_prediction"] == rec["raw_prediction"]
    assert first["answer"] == rec["answer"] and first["question"] == rec["question"]
    (call,) = first["calls"]  # full_context: one answer call, exactly as sent
    assert call["phase"] == "answer" and call["reply"] == rec["raw_prediction"]
    assert call["messages"][-1]["content"].endswith(data[0].questions[0].question + "\nAnswer:")
    assert call["params"]["max_new_tokens"] == 48 and call["params"]["temperature"] == 0.0  # brief's cap
    assert call["prompt_tokens"] == rec["usage"]["answer_prompt_tokens"]
    assert "history 0 session 1 turn 2 text" in first["context"] and first["context"] in call["messages"][-1]["content"]
    text = (tmp_path / SAMPLES).read_text()
    assert secret not in text and "my key is" in text  # scrubbed, not dropped
    # construction calls are streamed per history (the Probe system makes one per ingest)
    Probe.log = []
    out2 = tmp_path / "probe"
    run_system(HistorySystems(lambda hid: Probe(llm, False)), samples(2, 1), out2, llm=llm,
               progress=False, log_samples=True, concurrency=2)
    built = [json.loads(x) for x in (out2 / CONSTRUCTION_CALLS).read_text().splitlines()]
    assert sorted((b["history_id"], b["messages"][0]["content"], b["phase"]) for b in built) == [
        ("h0", "build h0", "construction"), ("h1", "build h1", "construction")]
    assert all(len(json.loads(x)["calls"]) == 1 for x in (out2 / SAMPLES).read_text().splitlines())


def test_log_samples_off_writes_no_sample_files(tmp_path):
    llm = SharedLLM(SlowLLM(delay=0.0))
    run_system(full_context(llm), samples(1, 1), tmp_path, llm=llm, progress=False)
    assert not (tmp_path / "samples.jsonl").exists() and not (tmp_path / "construction_calls.jsonl").exists()
