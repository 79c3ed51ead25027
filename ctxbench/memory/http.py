"""``memory=http``: a memory system in another process, in any language, spoken to in JSON over HTTP.

The protocol is docs/http_protocol.md (the client: :mod:`ctxbench.memory.stores.remote`; a reference server:
docs/examples/http_memory_server.py). Each session of a history is one resumable step
(:class:`~ctxbench.memory.base.MemorySystem`): ``POST /add_session`` with the session and its fingerprint, and
once the remote acknowledges it, the step and the fingerprints acknowledged so far are committed to the
history's store in the run folder. Before feeding a history, ctxbench asks the remote which sessions it holds
(``POST /status``) and keeps the longest prefix that both sides have (same fingerprints); whatever the remote
holds beyond it is dropped (``/truncate``, or ``/reset`` when the remote cannot truncate), so a remote that
restarted without its state is re-fed, and one that kept it gets only the sessions it lacks.

``memory.mode=retrieve``: the remote returns memories for a question and ctxbench answers with the run's answer
prompt on the run's LLM, the same prompt and the same accounting as every other row. ``memory.mode=answer``: the
remote answers itself, calling the backend ctxbench lends it (``borrows_backend``; every request carries its
address and token, so its LLM calls are counted as construction while ingesting and as answer while answering).

A remote that times out, drops the connection, answers non-2xx or with malformed JSON fails its history in one
line naming the url and the endpoint: while ingesting as a construction stopped at that session
(:meth:`construction_stopped`, a rerun resumes there), while answering as a failed answer (``meta.failed``),
and the history's later questions fail at once with the same line.
"""
from __future__ import annotations

import logging
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import CannotEstimate
from ctxbench.core.registry import register
from ctxbench.core.types import History, Prediction, Question, Session, Turn, Usage

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.stores.records import REMEDY, StoreError
from ctxbench.memory.stores.remote import SUPPORTED_VERSIONS, RemoteError, RemoteMemory, fingerprint
from ctxbench.memory.stores.retrieval_notes import note_retrieval, note_retrieved, noting_retrieved, provenance

log = logging.getLogger(__name__)


def session_json(session: Session) -> dict[str, Any]:
    """A session as the protocol sends it: ``{id, date, turns: [{id, speaker, text, meta?}]}``."""
    turns = []
    for t in session.turns:
        turn: dict[str, Any] = {"id": t.id, "speaker": t.speaker, "text": t.text}
        if t.meta:
            turn["meta"] = t.meta
        turns.append(turn)
    return {"id": session.id, "date": session.date, "turns": turns}


def question_json(question: Question) -> dict[str, Any]:
    """A question as the protocol sends it: ``{id, text, date, options}`` (no gold field, ever)."""
    date = (question.meta or {}).get("question_date")
    return {"id": question.id, "text": question.question, "date": date if isinstance(date, str) and date else None,
            "options": list(question.options) if question.options else None}


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


@register("memory", "http")
class HttpMemory(MemorySystem):
    """A remote memory system (see the module doc)."""

    name = "http"
    needs_embedder = False
    borrows_backend = True

    def __init__(self, cfg: Any, *, llm: Any, embedder: Any = None, workdir: Any = ".") -> None:
        # the embedder (memory.needs_embedder=true) is for the lent backend to serve; this side embeds nothing
        super().__init__(cfg, llm=llm, embedder=None, workdir=workdir)
        if cfg.mode not in ("retrieve", "answer"):
            raise ConfigError(f"memory.mode={cfg.mode!r}: choose 'retrieve' or 'answer'")
        url = str(cfg.url or "")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"memory.url={url!r}: the remote memory system's http(s) URL, e.g. http://127.0.0.1:8765")
        released = getattr(llm, "released", None)  # the shared backend: the workers' lock let go while we wait
        self.remote = RemoteMemory(url, timeout_s=cfg.timeout_s, retries=cfg.retries, backoff_s=cfg.backoff_s,
                                   wait=released if callable(released) else None, secrets=self._secrets)
        self.caps: dict[str, Any] | None = None
        self.broken: str | None = None  # this history's remote failed: its later questions fail at once
        self.refed = 0  # sessions acknowledged before that the remote no longer held (fed again)
        self._history: History | None = None
        self._steps: list[tuple[dict[str, Any], str]] = []
        self._applied = 0

    def _secrets(self) -> list[str]:
        return [self.lent.api_key] if self.lent is not None and self.lent.api_key else []

    def reset(self) -> None:
        super().reset()
        self.broken = None
        self.refed = 0

    # ---- what the remote is told ------------------------------------------------------------------
    def backend(self) -> dict[str, Any] | None:
        """The lent backend as every request carries it, or None when the run lends none."""
        if self.lent is None:
            return None
        return {"base_url": self.lent.base_url, "api_key": self.lent.api_key, "model": self.lent.model,
                "embedding_model": self.lent.embedding_model}

    def identity(self) -> dict[str, Any]:
        caps = self.caps or {}
        return {"url": self.remote.url, "name": caps.get("name"), "version": caps.get("version"),
                "protocol_version": caps.get("protocol_version")}

    def connect(self) -> None:
        """The remote's capabilities, checked once per instance: its protocol version and this run's mode."""
        if self.caps is not None:
            return
        got = self.remote.capabilities()
        if got["protocol_version"] not in SUPPORTED_VERSIONS:
            raise ConfigError(f"memory.url={self.remote.url}: the remote speaks protocol_version "
                              f"{got['protocol_version']!r}; this ctxbench speaks {', '.join(map(str, SUPPORTED_VERSIONS))}")
        if self.cfg.mode not in got["capabilities"]:
            raise ConfigError(f"memory.mode={self.cfg.mode}: the remote at {self.remote.url} ({got.get('name')}) "
                              f"offers {sorted(got['capabilities'])}, not {self.cfg.mode!r}")
        if self.cfg.mode == "answer" and self.lent is None:
            raise ConfigError("memory.mode=answer: no backend was lent to this run, so the remote's LLM calls "
                              "could not be counted; use memory.mode=retrieve")
        self.caps = got

    # ---- ingestion: one step per session ----------------------------------------------------------
    def ingest(self, history: History) -> None:
        self._history = history
        try:
            super().ingest(history)
        except RemoteError as e:
            self.fail_construction(str(e))

    def fail_construction(self, why: str) -> None:
        """The remote failed while this history was fed: stop at the session it was on (nothing kept of it)."""
        self.store.rollback()
        n = len(self._steps)
        step = min(self.store.progress(self.hid) + 1, max(n, 1))
        self.stopped = {"step": step, "steps": n, "failed_calls": 0, "error": why}
        self.broken = why

    def steps(self, history: History) -> list[tuple[dict[str, Any], str]]:
        if not history.sessions:  # a document: its paragraphs as the turns of one session (as memory=rag does)
            paras = [p for p in history.text.split("\n") if p.strip()]
            sessions = [Session(id="doc", turns=[Turn("", p, str(i)) for i, p in enumerate(paras)])]
        else:
            sessions = self.limit(history)
        out = []
        for s in sessions:
            body = session_json(s)
            out.append((body, fingerprint(body)))
        self._steps = out
        return out

    def load(self) -> None:
        """Agree with the remote on what it holds, before the base class reads the progress to resume from."""
        hid, store = self.hid, self.store
        steps = self.steps(self._history)
        self.connect()
        store.check_resume(hid, len(steps), self.cfg, getattr(self.llm, "model_name", None), force=self.force_resume)
        self.check_remote()
        expected = [fp for _, fp in steps]
        done = store.progress(hid)
        local = common_prefix(list(store.get_state(hid, "acked", []))[:done], expected)
        held = self.remote.reset(hid) if self.cfg.rebuild else self.remote.status(hid)[0]
        keep = min(local, common_prefix(held, expected))
        if len(held) > keep:  # what the remote holds beyond what both sides agree on is never trusted
            if "truncate" in self.caps["capabilities"]:
                held = self.remote.truncate(hid, keep)
            else:
                held, keep = self.remote.reset(hid), 0
            if held != expected[:keep]:
                raise RemoteError(f"memory=http: {self.remote.url}: after dropping sessions from {keep + 1} on, "
                                  f"the remote still holds {len(held)} sessions of history {hid!r} that differ")
        if keep < done:
            log.warning("memory=http: the remote at %s holds %d of the %d sessions of history %s acknowledged "
                        "before: feeding it again from session %d", self.remote.url, keep, done, hid, keep + 1)
            self.refed += done - keep
        if keep != done or local != done:
            store.set_progress(hid, keep)
            store.set_state(hid, "acked", expected[:keep])
            store.commit()
        self._applied = keep

    def check_remote(self) -> None:
        """The history's store was built against this remote (name, version), or is new."""
        now = {k: self.identity()[k] for k in ("name", "version", "protocol_version")}
        old = self.store.get_state(self.hid, "_remote")
        if isinstance(old, dict) and old != now and self.store.progress(self.hid) and not self.force_resume:
            raise StoreError(self.store.path, f"history {self.hid!r} was fed to remote {old} and the remote at "
                                              f"{self.remote.url} is now {now}; {REMEDY}")
        if old != now:
            self.store.set_state(self.hid, "_remote", now)
            self.store.commit()

    def apply(self, step: tuple[dict[str, Any], str], i: int) -> None:
        session, fp = step
        body = {"history_id": self.hid, "session_index": i, "fingerprint": fp, "session": session,
                "speakers": list(self._history.speakers if self._history else []), "backend": self.backend()}
        held = self.remote.add_session(body)
        if len(held) <= i or held[i] != fp:
            raise RemoteError(f"memory=http: {self.remote.url} POST /add_session: the reply's 'sessions' "
                              f"({len(held)}) lack session {i + 1}'s fingerprint")
        self._applied = i + 1

    def save_state(self) -> None:
        self.store.set_state(self.hid, "acked", [fp for _, fp in self._steps[: self._applied]])

    def memory_stats(self) -> tuple[int, int]:
        """(memories, their tokens) from ``/dump`` when the remote offers it, else ``/status``'s ``memory_items``."""
        if "dump" in (self.caps or {}).get("capabilities", []):
            items = self.remote.dump(self.hid)
            return len(items), sum(self.llm.count_tokens(m["text"]) for m in items)
        got = self.remote.status(self.hid)[1].get("memory_items")
        return (int(got) if isinstance(got, int) and not isinstance(got, bool) else 0), 0

    # ---- answering --------------------------------------------------------------------------------
    def answer(self, question: Question) -> Prediction:
        if self.broken is not None:
            return self.failed(f"{self.broken} (an earlier request of history {self.hid})")
        try:
            pred = self.remote_answer(question) if self.cfg.mode == "answer" else super().answer(question)
        except RemoteError as e:
            self.broken = str(e)
            return self.failed(str(e))
        pred.meta["remote"] = self.identity()
        if self.refed:
            pred.meta["remote_refed_sessions"] = self.refed
        return pred

    def failed(self, why: str) -> Prediction:
        """No answer: the remote failed (the evaluator writes the question ``failed`` with ``why``)."""
        return Prediction(text="", usage=Usage(), meta={"failed": True, "error": why, "remote": self.identity()})

    def retrieve_noted(self, question: Question) -> tuple[str, dict[str, Any]]:
        """The remote's ``context``, else its memories' texts one per line in rank order (noted for evidence recall)."""
        got = self.remote.retrieve({"history_id": self.hid, "question": question_json(question), "k": int(self.cfg.k)})
        items = self.note(got)
        if isinstance(got.get("stored"), int):
            note_retrieval(int(self.cfg.k), int(got["stored"]))
        return (got["context"] if "context" in got else "\n".join(m["text"] for m in items)), {}

    def note(self, got: dict[str, Any]) -> list[dict[str, Any]]:
        items = got.get("memories") or []
        for rank, m in enumerate(items):
            note_retrieved(("remote", rank), provenance(m))
        return items

    def remote_answer(self, question: Question) -> Prediction:
        """``POST /answer``: the remote answers, calling the lent backend (metered here as answer calls)."""
        t0, a0 = self.answer_start()
        with noting_retrieved() as retrieved:
            got = self.remote.answer({"history_id": self.hid, "question": question_json(question), "k": int(self.cfg.k),
                                      "max_tokens": self.answer_max_tokens(), "backend": self.backend()})
            items = self.note(got)
        context = got["context"] if isinstance(got.get("context"), str) else "\n".join(m["text"] for m in items)
        extra = {"remote_usage": got["usage"]} if isinstance(got.get("usage"), dict) else {}
        usage = self.answer_usage(t0, a0, self.llm.count_tokens(context) if context else 0, extra)
        return Prediction(text=got["text"].strip(), usage=usage,
                          meta={"context": context, "prompt_version": self.prompt_version(), "retrieved": retrieved})

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        raise CannotEstimate("memory=http: no estimate (the remote decides what it keeps, what it retrieves and "
                             "which LLM calls it makes)")

    def prompt_version(self) -> str:
        caps = self.caps or {}
        return f"remote:{caps.get('name')}@{caps.get('version')}"

    def close(self) -> None:
        super().close()
        self.remote.close()
