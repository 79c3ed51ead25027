"""The evaluator's workers: histories and questions answered concurrently, system code one at a time.

``eval`` runs its work as *tasks*: one ingestion per history, one answer per question. With
``concurrency: 1`` they run in the calling thread in dataset order (ingest a history, answer its
questions, then the next history). With ``N > 1`` they run on N worker threads under one lock,
:class:`Gate`: a worker holds it while it runs system code (retrieval, memory updates, SQLite,
the embedder), and the shared LLM backend (:class:`ctxbench.llm.shared.SharedLLM`) releases it
for the length of each call. So system code never runs twice at once — no system needs to be
thread-safe — while up to N LLM calls are in flight (``llm=openai``: N requests; ``llm=hf``: the
calls waiting together are generated as one batch).

Which task a free worker takes (:class:`Schedule`): a new history's ingestion while fewer than
``open_limit`` histories are open (ingested or ingesting, with questions left), else the next
question of an open history, in dataset order. A system whose answering changes its state
(:attr:`ctxbench.core.system.System.answer_writes_state`: MemoryBank's recall) answers one question
of a history at a time, in dataset order; the others answer a history's questions in parallel.

The first task that raises stops the workers (no new task starts; calls in flight finish) and the
exception is raised in the calling thread, as in a sequential run.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator


class Gate:
    """The lock system code runs under, and how many workers are running system code now.

    ``active`` counts the workers that are neither idle (no task to take) nor waiting in an LLM
    call: running a task, taking one, or waiting for the lock to do so. The call batcher generates
    once it is 0 (no worker can add a call) or its batch is full.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.work = threading.Condition(self.lock)  # task state changed (under ``lock``)
        self.changed = threading.Condition(threading.Lock())  # ``active`` or the batcher changed
        self.active = 0
        self._mine = threading.local()
        self._waited: dict[int, float] = {}  # thread id -> seconds it waited to get the lock back

    def holding(self) -> bool:
        return bool(getattr(self._mine, "held", False))

    def waited_s(self) -> float:
        """Seconds this thread has waited to get the lock back after its LLM calls (so far)."""
        return self._waited.get(threading.get_ident(), 0.0)

    def hold(self) -> "Hold | None":
        """This worker's hold on the lock, for another thread to release while the worker waits on it
        (None off the workers)."""
        return Hold(self, threading.get_ident()) if self.holding() else None

    @contextmanager
    def task(self) -> Iterator[None]:
        """Run a task's system code (the caller holds :attr:`lock`)."""
        self._mine.held = True
        try:
            yield
        finally:
            self._mine.held = False

    @contextmanager
    def released(self) -> Iterator[None]:
        """Let other workers run while this one waits for an LLM call (a no-op off the workers)."""
        if not self.holding():
            yield
            return
        self.add(-1)
        self._mine.held = False
        self.lock.release()
        try:
            yield
        finally:
            self.add(1)  # running again as soon as it has the lock: a batch should wait for it
            t0 = time.perf_counter()
            self.lock.acquire()
            self.add_wait(threading.get_ident(), time.perf_counter() - t0)
            self._mine.held = True

    def add_wait(self, thread: int, seconds: float) -> None:
        """``thread`` waited ``seconds`` more for the lock (its own :meth:`waited_s`)."""
        with self.changed:
            self._waited[thread] = self._waited.get(thread, 0.0) + seconds

    def add(self, n: int) -> None:
        """``n`` more (or fewer) workers running: started, gone idle, woken, in or out of a call, finished."""
        with self.changed:
            self.active += n
            self.changed.notify_all()


class Hold:
    """A worker's hold on the gate's lock, released and taken back *by another thread* on its behalf.

    A system that borrows the backend (:mod:`ctxbench.evaluation.lend`) calls it over HTTP: its worker
    blocks in the request, holding the lock, and the lent server's thread makes the LLM call. That thread
    releases the worker's hold for the call's length, as :meth:`Gate.released` does for a worker's own
    call (so other workers run, and the call batcher does not wait for a worker that cannot add a call),
    and takes it back before the reply goes out, so the worker goes on holding the lock. Calls the
    borrower makes side by side release it once, the last one to end takes it back. (A ``threading.Lock``
    may be released by any thread.)
    """

    def __init__(self, gate: Gate, thread: int):
        self.gate, self.thread = gate, thread
        self._calls = 0
        self._settled = False  # the worker's task ended: its hold is its own again, never released for it
        self._back = threading.Condition(threading.Lock())  # _calls changed

    @contextmanager
    def released(self) -> Iterator[None]:
        with self._back:
            if self._settled:  # a call that came as the task ended: served without touching the lock
                mine = False
            else:
                mine = True
                self._calls += 1
                if self._calls == 1:
                    self.gate.add(-1)
                    self.gate.lock.release()
        if not mine:
            yield
            return
        try:
            yield
        finally:
            with self._back:
                self._calls -= 1
                if self._calls == 0:
                    self.gate.add(1)
                    t0 = time.perf_counter()
                    self.gate.lock.acquire()
                    self.gate.add_wait(self.thread, time.perf_counter() - t0)
                    self._back.notify_all()

    def settle(self) -> None:
        """Called by the worker as its task ends: wait until no call holds its hold released (a request the
        borrower gave up on, its client timed out, is still being served), so the worker goes on holding the lock."""
        with self._back:
            while self._calls:
                self._back.wait()
            self._settled = True


@dataclass
class HistoryWork:
    """One history's tasks: ingest, then its questions (one at a time when ``in_order``)."""

    ingest: Callable[[], None]
    answers: list[Callable[[], None]]
    in_order: bool = False
    finish: Callable[[], None] | None = None  # after its last answer (close the history's system)
    state: str = "waiting"  # waiting → ingesting → open → done
    next_answer: int = 0
    in_flight: int = 0
    finished: int = 0


@dataclass
class Schedule:
    """Which task runs next (see the module doc); every method is called under the gate's lock."""

    histories: list[HistoryWork]
    open_limit: int
    running: int = 0
    error: BaseException | None = None
    _waiting: list[HistoryWork] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._waiting = list(self.histories)

    def _open(self) -> list[HistoryWork]:
        return [h for h in self.histories if h.state in ("ingesting", "open")]

    def next(self) -> tuple[HistoryWork, Callable[[], None], str] | None:
        if self.error is not None:
            return None
        if self._waiting and len(self._open()) < self.open_limit:
            h = self._waiting.pop(0)
            h.state = "ingesting"
            return h, h.ingest, "ingest"
        for h in self.histories:
            if h.state == "open" and h.next_answer < len(h.answers) and not (h.in_order and h.in_flight):
                task = h.answers[h.next_answer]
                h.next_answer += 1
                h.in_flight += 1
                return h, task, "answer"
        return None

    def done(self, h: HistoryWork, kind: str) -> Callable[[], None] | None:
        """Mark a task done; returns the history's ``finish`` when it was its last task."""
        if kind == "ingest":
            h.state = "open"
        else:
            h.in_flight -= 1
            h.finished += 1
        if h.state == "open" and h.finished == len(h.answers):
            h.state = "done"
            return h.finish
        return None

    def complete(self) -> bool:
        return self.error is not None or all(h.state == "done" for h in self.histories)


def run_tasks(histories: list[HistoryWork], workers: int, gate: Gate | None = None, open_limit: int | None = None
              ) -> None:
    """Run every history's tasks: in this thread when ``workers`` is 1, else on ``workers`` threads
    under ``gate``, with at most ``open_limit`` histories open (default ``workers``; 1 when one
    system instance serves every history). Raises the first task's exception."""
    if workers <= 1 or gate is None:
        for h in histories:
            h.ingest()
            for a in h.answers:
                a()
            if h.finish is not None:
                h.finish()
        return
    schedule = Schedule(histories, open_limit=max(1, open_limit or workers))
    threads = [threading.Thread(target=_worker, args=(schedule, gate), name=f"ctxbench-eval-{i}", daemon=True)
               for i in range(workers)]
    gate.add(workers)  # each counts as running until it finds no task to take
    for t in threads:
        t.start()
    try:
        with gate.lock:
            while not (schedule.complete() and schedule.running == 0):
                gate.work.wait(0.5)  # a timeout keeps Ctrl-C responsive
    except BaseException as e:  # KeyboardInterrupt: no new task starts
        with gate.lock:
            if schedule.error is None:
                schedule.error = e
            gate.work.notify_all()
        raise
    for t in threads:
        t.join()
    if schedule.error is not None:
        raise schedule.error


def _worker(schedule: Schedule, gate: Gate) -> None:
    import contextvars

    with gate.lock:
        while True:
            picked = schedule.next()
            if picked is None:
                if schedule.complete() or (schedule.error is not None):
                    gate.add(-1)
                    gate.work.notify_all()
                    return
                gate.add(-1)  # idle: a batch need not wait for this worker
                gate.work.wait()
                gate.add(1)
                continue
            h, task, kind = picked
            schedule.running += 1
            try:
                with gate.task():
                    contextvars.copy_context().run(task)  # each task its own call scopes
                    finish = schedule.done(h, kind)
                    if finish is not None:
                        finish()
            except BaseException as e:  # the first error stops every worker
                if schedule.error is None:
                    schedule.error = e
            finally:
                schedule.running -= 1
                gate.work.notify_all()
