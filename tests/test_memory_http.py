"""``memory=http`` (docs/http_protocol.md) against the reference server of docs/examples/http_memory_server.py.

- ``eval memory=http`` with the server in a process of its own gives the records of the same memory run in-process
  (the reference's memory class wrapped as a MemorySystem here): predictions, usage and what was retrieved;
- a remote that times out, answers malformed JSON or HTTP 500, or drops the connection fails its history in one
  line naming the url and the endpoint (counted by health, no traceback), and a rerun resumes at the session
  that failed (the sessions the remote holds are not sent again); a remote that lost its state is fed again;
- answer mode: the remote calls the backend it is lent, with the token every request carries;
- what the remote must say (protocol version, the run's mode) is checked in one line.

The kill -9 of a real remote process mid-ingestion, restarted with and without its state, is marked ``process``.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.errors import ConfigError
from ctxbench.core.types import History, Question, Session
from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.llm.shared import SharedLLM
from ctxbench.memory.base import MemorySystem
from ctxbench.memory.stores.retrieval_notes import note_retrieval, note_retrieved, provenance
from ctxbench.metrics.health import run_health
from http_memory import reference, serve, spawn, stop

SAMPLE = Path(__file__).resolve().parents[1] / "ctxbench" / "samples" / "locomo_sample.json"
DYING = Path(__file__).resolve().parent / "http_memory_dying.py"


def sample() -> list:
    return registry.build("dataset", option_config("dataset", {"name": "locomo", "path": str(SAMPLE)}))


def logging_handler(fault: str | None = None, path: str = "/add_session", nth: int = 0) -> Any:
    """A reference Handler that logs every request body (``log``) and makes the ``nth`` (1-based) request to
    ``path`` fail as ``fault`` says: timeout (replies after the client gave up), malformed, http500, dropped."""
    ref = reference()

    class Handler(ref.Handler):
        log: list[tuple[str, dict]] = []
        calls: Counter = Counter()
        lock = threading.Lock()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with Handler.lock:
                Handler.calls[self.path] += 1
                n = Handler.calls[self.path]
                Handler.log.append((self.path, json.loads(raw)))
            if fault and self.path == path and n == nth:
                return self.fail()
            self.reply(*self.handle_json("POST", self.path, json.loads(raw)))

        def fail(self) -> None:
            self.close_connection = True
            if fault == "timeout":
                time.sleep(1.0)  # the client gave up after memory.timeout_s; nothing is sent
            elif fault == "malformed":
                body = b'{"sessions": ["abc", '
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif fault == "http500":
                self.reply(500, {"error": {"code": "internal", "message": "boom"}})
            # dropped: the connection is closed without a reply

        @classmethod
        def sent(cls, hid: str) -> list[int]:
            """The session indexes of the add_session requests made for ``hid``, in order."""
            return [b["session_index"] for p, b in cls.log if p == "/add_session" and b["history_id"] == hid]

    return Handler


def run_http(url: str, out: Path, concurrency: int = 1, inner: Any = None, **settings: Any):
    """``memory=http`` at ``url`` through the evaluator's run loop, which lends the run's backend (over
    ``inner``, the scripted model by default) to the system as eval does."""
    cfg = option_config("memory", {"name": "http", "url": url, "progress": False, "retries": 0, "timeout_s": 0.5,
                                   **settings})
    llm = SharedLLM(inner or ScriptedChatModel())

    def make(hid: str):
        return registry.build("memory", cfg, llm=llm, workdir=out / "stores" / hid)

    return run_system(HistorySystems(make), sample(), out, llm=llm, progress=False, concurrency=concurrency)


def untimed(recs: list[dict]) -> list[dict]:
    """The records without wall times and the remote's address (the same run over another port)."""
    out = []
    for r in recs:
        r = json.loads(json.dumps(r))
        r.pop("answer_seconds", None)
        for u in (r.get("usage") or {},):
            u.pop("ingest_seconds", None), u.pop("answer_seconds", None)
            (u.get("extra") or {}).pop("search_seconds", None)
        (r.get("construction") or {}).pop("seconds", None)
        (r.get("meta") or {}).pop("remote", None)
        out.append(r)
    return out


# ---- the same memory over HTTP and in-process ------------------------------------------------------

class InProcessTurns(MemorySystem):
    """The reference server's memory (its TurnMemory class) run in this process: what memory=http must equal."""

    name = "turns_in_process"
    needs_embedder = False

    def __init__(self, cfg: Any, *, llm: Any, embedder: Any = None, workdir: Any = ".") -> None:
        super().__init__(cfg, llm=llm, embedder=None, workdir=workdir)
        self.memory = reference().TurnMemory()

    def steps(self, history: History) -> list[Session]:
        return self.limit(history)

    def apply(self, s: Session, i: int) -> None:
        turns = [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in s.turns]
        self.memory.add_session(self.hid, i, str(i), {"id": s.id, "date": s.date, "turns": turns})

    def retrieve(self, question: Question) -> str:
        got = self.memory.retrieve(self.hid, question.question, int(self.cfg.k))
        for rank, m in enumerate(got):
            note_retrieved(("local", rank), provenance(m))
        note_retrieval(int(self.cfg.k), len(self.memory.memories(self.hid)))
        return "\n".join(m["text"] for m in got)

    def memory_stats(self) -> tuple[int, int]:
        mems = self.memory.memories(self.hid)
        return len(mems), sum(self.llm.count_tokens(m["text"]) for m in mems)


def scripted_eval(monkeypatch, out: Path, url: str, memory: Any = None, *args: str) -> tuple[Any, list[dict], dict]:
    """``eval memory=http memory.url=URL dataset=locomo_sample`` in-process on the bench's scripted chat model
    (``memory``: build this class instead of memory=http's): (process, records, results.json)."""
    real = registry.build

    def build(kind: str, c: Any, **deps: Any) -> Any:
        if kind == "llm":
            return ScriptedChatModel()
        if kind == "memory" and memory is not None:
            return memory(c, **deps)
        return real(kind, c, **deps)

    with monkeypatch.context() as m:
        m.setattr(registry, "build", build)
        m.setattr("ctxbench.evaluation.systems.preflight", lambda llm: None)
        p = run_cli("eval", "memory=http", f"memory.url={url}", "dataset=locomo_sample", "metrics=[f1]",
                    "progress=false", f"hydra.run.dir={out}", *args)
    recs = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()] if \
        (out / "predictions.jsonl").exists() else []
    res = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p, recs, res


def test_eval_over_http_equals_the_same_memory_in_process(monkeypatch, tmp_path):
    proc, url = spawn()  # the reference server, a process of its own
    try:
        p, remote, res = scripted_eval(monkeypatch, tmp_path / "http", url)
    finally:
        proc.kill()
        proc.wait()
    assert p.returncode == 0, p.stderr[-2000:]
    p2, local, res2 = scripted_eval(monkeypatch, tmp_path / "local", "http://127.0.0.1:9", InProcessTurns)
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert len(remote) == 16 and not any(r.get("failed") for r in remote)
    for r, l in zip(untimed(remote), untimed(local)):
        assert (r["prediction"], r["raw_prediction"]) == (l["prediction"], l["raw_prediction"]), r["id"]
        assert r["usage"] == l["usage"], r["id"]  # answer tokens, held text, memory items and tokens, retrieval
        assert r["meta"]["retrieved"] == l["meta"]["retrieved"] and r["meta"]["retrieved"], r["id"]
        assert r["construction"] == l["construction"], r["id"]
    assert remote[0]["meta"]["remote"]["name"] == "turns-reference"
    assert res["overall"] == res2["overall"] and res["health"]["status"] == "ok"
    assert remote[0]["usage"]["memory_items"] == 16 and remote[0]["usage"]["held_text"] > 0


# ---- a failing remote fails its history in one line, and the rerun resumes ------------------------------

@pytest.mark.parametrize("fault, line", [
    ("timeout", "timed out after 0.5 s"),
    ("malformed", "malformed JSON reply"),
    ("http500", "HTTP 500: internal: boom"),
    ("dropped", "connection dropped before a complete reply"),
])
def test_a_failing_remote_fails_its_history_in_one_line_and_the_rerun_resumes(fault, line, tmp_path, capsys):
    handler = logging_handler(fault, "/add_session", nth=2)  # demo-1's second session
    server, url = serve(handler)
    try:
        first = run_http(url, tmp_path / "run")
        want = f"memory=http: {url} POST /add_session: {line}"
        h1 = [r for r in first if r["history_id"] == "demo-1"]
        assert all(r["failed"] and r["prediction"] == "" for r in h1)
        assert all(r["error"].startswith(f"construction stopped at step 2/3: {want}") for r in h1), h1[0]["error"]
        assert h1[0]["construction_stopped"]["step"] == 2 and "\n" not in h1[0]["error"]
        assert not any(r.get("failed") for r in first if r["history_id"] == "demo-2")  # the other history went on
        health = run_health(first)
        assert health["status"] == "failed" and want in health["reason"] and set(health["stopped_histories"]) == {"demo-1"}
        assert health["failed_questions"] == len(h1)
        assert "Traceback" not in capsys.readouterr().err
        sent_before = handler.sent("demo-1")
        again = run_http(url, tmp_path / "run")  # the remote is healthy again: demo-1 resumes at session 2
        assert handler.sent("demo-1")[len(sent_before):] == [1, 2]  # session 1, acknowledged, is not sent again
        assert not any(r.get("failed") for r in again)
        if fault == "http500":  # the resumed run ends with a clean run's answers (the remote truncated for it)
            clean = run_http(url, tmp_path / "clean")
            assert [r["prediction"] for r in again] == [r["prediction"] for r in clean]
    finally:
        stop(server)


def test_a_failing_retrieve_fails_the_rest_of_its_history_at_once(tmp_path):
    handler = logging_handler("http500", "/retrieve", nth=2)
    server, url = serve(handler)
    try:
        recs = run_http(url, tmp_path / "run")
    finally:
        stop(server)
    h1 = [r for r in recs if r["history_id"] == "demo-1"]
    assert not h1[0].get("failed") and all(r["failed"] for r in h1[1:])
    assert h1[1]["error"] == f"memory=http: {url} POST /retrieve: HTTP 500: internal: boom"
    assert all(r["error"].endswith("(an earlier request of history demo-1)") for r in h1[2:])
    assert handler.calls["/retrieve"] == 2 + 5  # demo-1's later questions asked nothing; demo-2's 5 did
    assert not any(r.get("failed") for r in recs if r["history_id"] == "demo-2")
    assert run_health(recs)["failed_questions"] == len(h1) - 1


def test_a_dropped_connection_is_retried_and_the_session_is_held_once(tmp_path):
    handler = logging_handler("dropped", "/add_session", nth=2)
    server, url = serve(handler)
    try:
        recs = run_http(url, tmp_path / "run", retries=1, backoff_s=0.01)
        assert not any(r.get("failed") for r in recs)
        assert handler.sent("demo-1") == [0, 1, 1, 2]  # the same request again, idempotent
        assert len(server.memory.held("demo-1")) == 3
    finally:
        stop(server)


def test_a_remote_that_lost_its_state_is_fed_again(tmp_path):
    server, url = serve(logging_handler("http500", "/add_session", nth=3))
    first = run_http(url, tmp_path / "run")  # demo-1 stops at session 3; sessions 1-2 acknowledged
    stop(server)
    assert first[0]["construction_stopped"]["step"] == 3
    fresh = logging_handler()
    server, url = serve(fresh)  # restarted without its state (and on another port)
    try:
        again = run_http(url, tmp_path / "run")
        assert fresh.sent("demo-1") == [0, 1, 2]  # everything fed again, in order
        assert not any(r.get("failed") for r in again)
        assert again[0]["meta"]["remote_refed_sessions"] == 2
    finally:
        stop(server)


def test_rebuild_resets_the_remote_and_feeds_every_session(tmp_path):
    handler = logging_handler()
    server, url = serve(handler)
    try:
        run_http(url, tmp_path / "run")
        (tmp_path / "run" / "predictions.jsonl").unlink()
        run_http(url, tmp_path / "run", rebuild=True)
        assert [p for p, b in handler.log if b.get("history_id") == "demo-2"].count("/reset") == 1
        assert handler.sent("demo-2") == [0, 1, 0, 1]
    finally:
        stop(server)


# ---- answer mode: the remote calls the backend it is lent -----------------------------------------------

class FailingChat(ScriptedChatModel):
    """The scripted model whose every call fails (a server that is down), as a backend reports it."""

    def chat(self, messages, **kw):
        from ctxbench.llm.base import ChatResult

        return ChatResult(text="", prompt_tokens=0, completion_tokens=0, failed=True, error="HTTP 503: down")


def test_answer_mode_calls_the_lent_backend_with_the_token_every_request_carries(tmp_path):
    handler = logging_handler()
    server, url = serve(handler)
    try:
        recs = run_http(url, tmp_path / "run", mode="answer")
    finally:
        stop(server)
    assert not any(r.get("failed") for r in recs) and all(r["raw_prediction"] for r in recs)
    sent = [b["backend"] for p, b in handler.log if p in ("/add_session", "/answer")]
    assert sent and all(b["api_key"].startswith("sk-lent-") and b["base_url"].startswith("http://127.0.0.1:")
                        for b in sent)
    assert len({b["api_key"] for b in sent}) == 2  # one token per history's instance
    # the remote's calls reached ctxbench's own backend over the lent endpoint and were counted as answers
    assert sum(r["usage"]["answer_calls"] for r in recs) >= len(recs)
    assert all(r["usage"]["answer_prompt_tokens"] > 0 for r in recs)
    assert recs[0]["usage"]["extra"]["remote_usage"]["prompt_tokens"] > 0
    assert recs[0]["usage"]["held_text"] > 0 and recs[0]["meta"]["retrieved"]
    text = (tmp_path / "run" / "predictions.jsonl").read_text()
    assert not any(b["api_key"] in text for b in sent)


def test_answer_mode_failing_lent_backend_fails_the_history_without_the_token(tmp_path):
    handler = logging_handler()
    server, url = serve(handler)
    try:
        recs = run_http(url, tmp_path / "run", inner=FailingChat(), mode="answer")
    finally:
        stop(server)
    assert all(r.get("failed") for r in recs)
    assert f"memory=http: {url} POST /answer: HTTP 502" in recs[0]["error"]
    tokens = {b["backend"]["api_key"] for p, b in handler.log if p == "/answer"}
    assert tokens and not any(t in (tmp_path / "run" / "predictions.jsonl").read_text() for t in tokens)


def test_answer_mode_without_a_lent_backend_is_refused_in_one_line(tmp_path):
    server, url = serve()
    try:
        cfg = option_config("memory", {"name": "http", "url": url, "progress": False, "mode": "answer"})
        system = registry.build("memory", cfg, llm=SharedLLM(ScriptedChatModel()), workdir=tmp_path / "s")
        with pytest.raises(ConfigError) as e:
            system.connect()
    finally:
        stop(server)
    assert "memory.mode=answer: no backend was lent to this run" in str(e.value) and "\n" not in str(e.value)


# ---- what the remote must say, checked in one line ---------------------------------------------------

def capabilities_handler(**caps: Any) -> Any:
    ref = reference()

    class H(ref.Handler):
        def route(self, method: str, path: str, body: Any) -> dict:
            got = super().route(method, path, body)
            return {**got, **caps} if path == "/capabilities" else got

    return H


@pytest.mark.parametrize("caps, settings, message", [
    ({"protocol_version": 2}, {}, "the remote speaks protocol_version 2; this ctxbench speaks 1"),
    ({"capabilities": ["retrieve"]}, {"mode": "answer"}, "memory.mode=answer: the remote at URL (turns-reference) "
                                                         "offers ['retrieve'], not 'answer'"),
])
def test_what_the_remote_offers_is_checked_in_one_line(caps, settings, message, tmp_path):
    server, url = serve(capabilities_handler(**caps))
    try:
        with pytest.raises(ConfigError) as e:
            run_http(url, tmp_path / "run", **settings)
    finally:
        stop(server)
    assert message.replace("URL", url) in str(e.value) and "\n" not in str(e.value)


def test_a_bad_url_is_refused_at_compose_time(tmp_path):
    p = run_cli("eval", "memory=http", "memory.url=localhost:8765", "dataset=locomo_sample", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 2 and "memory.url" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("eval", "memory=http", "dataset=locomo_sample", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 2 and "memory=http: set memory.url (it has no default)" in p.stderr
    assert "Traceback" not in p.stderr and "Loading weights" not in p.stderr  # said before the LLM loads


def test_eval_prints_the_failed_history_in_one_line(monkeypatch, tmp_path):
    server, url = serve(logging_handler("http500", "/add_session", nth=1))
    try:
        p, recs, res = scripted_eval(monkeypatch, tmp_path / "run", url, None, "memory.retries=0")
    finally:
        stop(server)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out
    want = f"history demo-1: construction stopped at step 1/3: memory=http: {url} POST /add_session: HTTP 500: " \
           "internal: boom"
    assert want in out, out[-3000:]
    assert res["health"]["stopped_histories"]["demo-1"]["error"].endswith("HTTP 500: internal: boom")


# ---- a real remote process killed mid-ingestion ------------------------------------------------------

@pytest.mark.process
@pytest.mark.parametrize("keeps_state", [True, False])
def test_remote_killed_mid_ingestion_then_restarted(keeps_state, tmp_path):
    """The remote dies (SIGKILL) while adding demo-1's third session; restarted on the same port, with its state
    file or without, the rerun feeds it what it lacks: session 3 only, or every session again."""
    state, log = tmp_path / "state.json", tmp_path / "sent.jsonl"
    proc, url = spawn("--state", str(state), "--log", str(log), "--die-at", "demo-1:2", script=DYING)
    try:
        first = run_http(url, tmp_path / "run", timeout_s=5)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    h1 = [r for r in first if r["history_id"] == "demo-1"]
    assert all(r["failed"] for r in h1) and h1[0]["construction_stopped"]["step"] == 3
    assert "POST /add_session: connection dropped before a complete reply" in h1[0]["error"]
    assert all(r["failed"] for r in first if r["history_id"] == "demo-2")  # nobody listens any more: cannot connect
    assert "cannot connect" in [r for r in first if r["history_id"] == "demo-2"][0]["error"]
    if not keeps_state:
        state.unlink()
    port = url.rsplit(":", 1)[1]
    proc, url2 = spawn("--port", port, "--state", str(state), "--log", str(log), script=DYING)
    try:
        assert url2 == url
        before = len(log.read_text().splitlines())
        again = run_http(url, tmp_path / "run", timeout_s=5)
        sent = [json.loads(x) for x in log.read_text().splitlines()[before:]]
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    assert not any(r.get("failed") for r in again)
    demo1 = [s["session_index"] for s in sent if s["history_id"] == "demo-1"]
    assert demo1 == ([2] if keeps_state else [0, 1, 2])
    assert [s["session_index"] for s in sent if s["history_id"] == "demo-2"] == [0, 1]


def test_estimate_says_in_one_line_that_the_remote_decides(tmp_path):
    from ctxbench.core.plan import CannotEstimate

    cfg = option_config("memory", {"name": "http", "url": "http://127.0.0.1:9", "progress": False})
    system = registry.build("memory", cfg, llm=ScriptedChatModel(), workdir=tmp_path)
    with pytest.raises(CannotEstimate, match=r"^memory=http: no estimate \(the remote decides"):
        list(system.estimate_calls(sample()[0].history, sample()[0].questions))
