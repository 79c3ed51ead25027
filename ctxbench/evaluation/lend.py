"""The run's lent backend: a borrowing system's calls over HTTP counted as its own calls through ``self.llm``.

A system whose class sets ``borrows_backend = True`` speaks only OpenAI (a plug-in wrapping a library,
``memory=http``). For such a system the run starts one :class:`~ctxbench.llm.lend.server.LendServer`
(at the first one built; stopped when the run ends, also on errors) and hands each instance its own
:class:`~ctxbench.core.lent.LentBackend` with :meth:`~ctxbench.core.system.System.use_backend` as it is
built, before its first ``ingest``. Each instance's token (key-shaped, ``sk-lent-...``, so the secret
scrubbing of logs and results hides it) works only on that server and names that instance only; the
key of the user's own server (``llm=openai``) stays inside the backend.

Accounting: the run loop binds an instance to the task it runs (:meth:`Lender.task`: its ``reset``,
``ingest`` — phase ``construction`` — each ``answer`` — phase ``answer`` — and its ``close``). The binding
holds a copy of the worker's :mod:`contextvars` context (its call scopes: per-answer and per-ingest cost,
``log_samples``) and its hold on the workers' lock (:class:`~ctxbench.evaluation.pool.Hold`). The server
runs each call the instance's token sends inside that context with that phase, so the call is counted,
cached, logged and failed exactly as the same call made by the system through ``self.llm`` in that moment.
While an LLM call runs the worker's hold is released on its behalf (as :meth:`Gate.released` does for a
worker's own call): other workers go on, and the call batcher does not wait for a worker blocked in an HTTP
request. Embedder calls keep the hold, as a built-in's embedder runs under the lock. A call that arrives
while the instance runs no task (a thread it left behind) is counted in the backend's total under
``construction``, in no task's scope. A call that raises (the backend unusable:
:class:`~ctxbench.llm.base.LLMUnavailable`, answered 503; anything else, 500) raises the same exception in
the task when it ends, so it stops this run as it stops a built-in's.

The token tells instances apart, not tasks: an instance that borrows answers its history's questions one
at a time (the run loop treats it as ``answer_writes_state``); histories still run side by side.
"""
from __future__ import annotations

import contextvars
import secrets
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ctxbench.core.lent import LentBackend
from ctxbench.core.system import ContractError, System

TOKEN_PREFIX = "sk-lent-"  # key-shaped: ctxbench.core.secrets scrubs it wherever it is written


def borrows(system: Any) -> bool:
    return bool(getattr(system, "borrows_backend", False))


@dataclass
class Binding:
    """The task an instance runs now: its context (a copy), phase and hold on the workers' lock."""

    context: contextvars.Context
    phase: str
    hold: Any = None


class Account:
    """One instance's account on the server: runs each call as that instance's own (see the module doc)."""

    def __init__(self, system: System):
        self.system = system
        self.binding: Binding | None = None
        self.error: BaseException | None = None  # a call's fatal error, raised in the task when it ends
        self.outside = 0  # requests that came while the instance ran no task
        self._lock = threading.Lock()

    def run(self, call: Callable[[str], Any], in_call: bool) -> Any:
        b = self.binding
        if b is None:  # no task: counted in the backend's total only
            with self._lock:
                self.outside += 1
            return call("construction")
        try:
            if in_call and b.hold is not None:
                with b.hold.released():
                    return b.context.copy().run(call, b.phase)
            return b.context.copy().run(call, b.phase)
        except Exception as e:  # what a built-in's call would have raised: its task raises it too
            with self._lock:
                self.error = self.error or e
            raise

    def take_error(self) -> BaseException | None:
        with self._lock:
            e, self.error = self.error, None
        return e


class Lender:
    """The lent backend of one run: the server (started for the first borrower), the accounts, the bindings."""

    def __init__(self, llm: Any, embedder: Any = None):
        self.llm, self.embedder = llm, embedder
        self.gate: Any = None  # the workers' Gate while they run (set by the run loop)
        self.server: Any = None
        self._accounts: dict[str, Account] = {}
        self._of: dict[int, str] = {}  # id(system) -> its token
        self._lock = threading.Lock()
        self.lent = 0  # instances handed the backend
        self.outside = 0  # requests of released instances that came outside any task

    def __enter__(self) -> "Lender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def account(self, token: str) -> Account | None:
        with self._lock:
            return self._accounts.get(token)

    def lend(self, system: System) -> None:
        """Hand ``system`` its LentBackend if its class borrows the backend (once per instance)."""
        if not borrows(system) or id(system) in self._of:
            return
        if self.llm is None or not callable(getattr(self.llm, "chat", None)):
            raise ContractError(f"{type(system).__qualname__} borrows the backend (borrows_backend = True), but this "
                                "run has no shared LLM backend to lend (a memory= system runs on llm=...)")
        server = self._serve()
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._accounts[token] = Account(system)
            self._of[id(system)] = token
            self.lent += 1
        lent = LentBackend(base_url=server.base_url, api_key=token, model=server.model,
                           embedding_model=server.embedding_model)
        with self.task(system, "construction"):
            system.use_backend(lent)

    def release(self, system: System) -> None:
        """``system`` is closed: its token stops working."""
        with self._lock:
            token = self._of.pop(id(system), None)
            account = self._accounts.pop(token, None) if token is not None else None
            if account is not None:
                self.outside += account.outside

    @contextmanager
    def task(self, system: System | None, phase: str) -> Iterator[None]:
        """Calls ``system``'s token sends in this block are its calls in this task, under ``phase``."""
        account = self._account_of(system)
        if account is None:
            yield
            return
        hold = self.gate.hold() if self.gate is not None else None
        before = account.binding
        account.binding = Binding(contextvars.copy_context(), phase, hold)
        try:
            yield
        except BaseException as e:
            fatal = account.take_error()
            if fatal is not None and fatal is not e:
                raise fatal from e
            raise
        finally:
            account.binding = before
            if hold is not None:  # a call it gave up on still holds its lock released: wait for it
                hold.settle()
        fatal = account.take_error()
        if fatal is not None:
            raise fatal

    def record(self) -> dict[str, Any] | None:
        """results.json ``lent_backend`` (None when no system borrowed it): instances lent, requests answered
        per route and refused, and requests that came while their instance ran no task (counted in no task)."""
        if self.server is None:
            return None
        with self._lock:
            outside = self.outside + sum(a.outside for a in self._accounts.values())
        return {"borrowers": self.lent, "requests": dict(self.server.requests), "outside_tasks": outside}

    def close(self) -> None:
        """Stop the server (if one started); every token stops working."""
        with self._lock:
            self._accounts.clear()
            self._of.clear()
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _account_of(self, system: Any) -> Account | None:
        with self._lock:
            token = self._of.get(id(system))
            return self._accounts.get(token) if token is not None else None

    def _serve(self) -> Any:
        if self.server is None:
            from ctxbench.llm.lend.server import LendServer

            server = LendServer(self.llm, self.embedder, self.account)
            server.start()
            self.server = server
        return self.server
