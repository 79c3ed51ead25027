"""The bad-input sweep's harness: every case of ``tests/bad_input/cases.py`` as a ``python -m ctxbench`` run.

``tests/test_bad_input_sweep.py::test_bad_input_case[<case id>]`` runs one case each (``make test-sweep``;
a few fast ones in the default suite). A case writes its malformed input (or a corrupted copy of a real run
folder) into a fresh temp folder and runs its command with ``cwd=`` the checkout and
``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled``, in-process through the tests' CLI runner
(``conftest.run_cli``: ``ctxbench.__main__.main``, argv, cwd, env and stdout/stderr swapped). A case with
a memory bound (``mem_bound_mb``: peak RSS, which only a process of its own shows) or ``exclusive``
(allocates GiBs) runs as a real subprocess in its own process group, killed at its timeout. Eval runs talk
to a fake OpenAI-compatible server started here (127.0.0.1, one behaviour per URL path).
Outcomes:

- ``clear``: exit code != 0 (no signal), no ``Traceback`` in stderr, the last stderr line starts with
  ``ctxbench: error:`` and names the case's file or key;
- ``recovered``: exit 0 where a documented recovery is right (a torn last line, an earlier checkpoint)
  and the run says so (or its output shows it);
- ``traceback``: a traceback in stderr;
- ``accepted``: exit 0 on a malformed input (garbage taken in silently), or a peak memory over the
  case's bound (an unbounded allocation taken in, whatever came after);
- ``not_recovered``: a clear error where only the recovery is right (a corrupt newest checkpoint
  with an intact earlier one: resume must fall back to it);
- ``unclear``: exit != 0 without a traceback but without a ``ctxbench: error:`` last line;
  ``vague``: a ``ctxbench: error:`` line that names neither the file nor the key;
- ``timeout``, ``crash`` (killed by a signal), ``EXECUTED`` (a malicious payload ran: the worst);
- controls (valid inputs): ``ok`` or ``control_failed``.

``BAD_INPUT_SWEEP_RECORD=FILE`` appends one JSON line per case run (id, group, outcome, exit code, seconds,
peak RSS, in-process or spawned) to FILE: the counts docs/trust.md quotes come from it. The checkout is
only read: everything the commands write goes below the temp folder (each case checks it).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bad_input import cases as bic
from conftest import REPO, run_cli
from structured_servers import LLAMA_CPP_PYTHON_REFUSAL, SERVERS, shape

OUTCOMES = ("clear", "recovered", "not_recovered", "traceback", "accepted", "unclear", "vague", "timeout", "crash",
            "EXECUTED")
GOOD = ("clear", "recovered", "ok")
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"}
REPLY = "7 May 2023"
TIMEOUT = 120  # seconds a case may run unless it says otherwise


# ---- the fake OpenAI-compatible server ------------------------------------------------------------

def chat_body(content: Any = REPLY, usage: dict | None = None) -> dict:
    return {"id": "fake-1", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}


MODELS = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
STRUCTURED = {  # "faults" modes (bad_input/faults_probe.py SERVER_MODES) served by tests/structured_servers.py
    "llama_cpp_python": SERVERS["llama_cpp_python"][0],
    "openai_like": SERVERS["openai"][0],
}


class Handler(BaseHTTPRequestHandler):
    """``/<mode>/v1/models`` and ``/<mode>/v1/chat/completions``; ``mode`` picks the misbehaviour."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _mode(self) -> tuple[str, str]:
        parts = self.path.strip("/").split("/", 2)
        return (parts[0], parts[2]) if len(parts) == 3 else ("ok", self.path.strip("/"))

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server hook
        mode, _ = self._mode()
        try:
            if mode == "models_nonjson":
                self._send(200, None, raw=b"<html>not json</html>")
            elif mode == "models_empty":
                self._send(200, {"object": "list", "data": []})
            elif mode == "models_500":
                self._send(500, {"error": {"message": "boom"}})
            else:
                self._send(200, MODELS)
        except OSError:
            pass

    def do_POST(self) -> None:  # noqa: N802 - http.server hook
        mode, _ = self._mode()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        from bad_input.faults_server import REPLIES  # what a server sends back: the "faults" group's modes
                                                     # (it builds its bodies with chat_body, from here)
        try:
            if mode in STRUCTURED:
                self._structured(STRUCTURED[mode], raw)
            elif mode in REPLIES:
                REPLIES[mode](self)
            else:
                self._chat(mode)
        except OSError:  # the client gave up (timeouts): nothing to answer
            pass

    def send_raw(self, status: str, headers: dict[str, str], body: bytes) -> None:
        """A reply written byte for byte: header values http.server would refuse (non-Latin-1) go as UTF-8."""
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.wfile.write(head.encode("utf-8") + b"Connection: close\r\n\r\n" + body)
        self.close_connection = True

    def _structured(self, behaviour: Any, raw: bytes) -> None:
        """A "faults" mode: a structured request as ``behaviour`` (tests/structured_servers.py) answers it; a
        plain one gets the usual reply."""
        from ctxbench.bench.loopback_server import HTTPError

        body = json.loads(raw or b"{}")
        if shape(body)[0] is None:
            self._send(200, chat_body())
            return
        try:
            self._send(200, chat_body(behaviour(body)))
        except HTTPError as e:
            self._send(e.status, {"error": {"message": e.message}})

    def _chat(self, mode: str) -> None:
        if mode == "close_mid":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(b'{"id":')
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "hang":
            time.sleep(20)
        bodies: dict[str, Any] = {
            "choices_empty": dict(chat_body(), choices=[]),
            "choices_not_list": dict(chat_body(), choices="x"),
            "choice_string": dict(chat_body(), choices=["x"]),
            "content_null": chat_body(None),
            "content_number": chat_body(5),
            "message_missing": dict(chat_body(), choices=[{"index": 0, "finish_reason": "stop"}]),
            "body_list": [1, 2],
            "usage_negative": chat_body(usage={"prompt_tokens": -5, "completion_tokens": -3, "total_tokens": -8}),
        }
        if mode in bodies:
            self._send(200, bodies[mode])
        elif mode == "http500":
            self._send(500, {"error": {"message": "internal error"}})
        elif mode == "refuse_invalid":  # a 500 naming the request invalid: not worth a retry
            self._send(500, {"error": {"message": LLAMA_CPP_PYTHON_REFUSAL}})
        elif mode in ("http404", "http401"):
            self._send(int(mode[4:]), {"error": {"message": "no"}})
        elif mode == "nonjson":
            self._send(200, None, raw=b"<html>502 Bad Gateway</html>")
        elif mode == "truncated_json":
            self._send(200, None, raw=json.dumps(chat_body()).encode()[:40])
        elif mode == "retry_after_huge":
            self._send(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "100000"})
        elif mode == "bad_gzip":
            self._send(200, chat_body(), headers={"Content-Encoding": "gzip"})
        else:
            self._send(200, chat_body())


class FakeServer:
    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- running one command ----------------------------------------------------------------------------

def must_spawn(case: bic.Case) -> bool:
    """A memory bound is a peak RSS, which only a process of its own shows; ``exclusive`` allocates GiBs."""
    return bool(case.mem_bound_mb or case.exclusive)


def run_spawned(argv: list[str], cwd: Path, work: Path, timeout: int, env: dict[str, str] | None = None,
                python: str = sys.executable) -> dict[str, Any]:
    """``python -m ctxbench argv`` in its own process group; returns rc, output, seconds, peak RSS."""
    full_env = {**os.environ, **ENV, "CTXBENCH_CACHE": str(work / "cache"), **(env or {})}
    full_env.setdefault("OMP_NUM_THREADS", "1")
    out_f, err_f = work / "stdout.txt", work / "stderr.txt"
    t0 = time.monotonic()
    with open(out_f, "wb") as so, open(err_f, "wb") as se:
        p = subprocess.Popen([python, "-m", "ctxbench", *argv], cwd=cwd, env=full_env, stdout=so, stderr=se,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    try:  # children left behind (dataloader workers, ...) go with the group
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return {"rc": p.returncode, "timed_out": timed_out.is_set(), "seconds": round(time.monotonic() - t0, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "stdout": out_f.read_text(errors="replace"),
            "stderr": err_f.read_text(errors="replace"), "spawned": True}


def run_in_process(argv: list[str], cwd: Path, work: Path, timeout: int,
                   env: dict[str, str] | None = None) -> dict[str, Any]:
    """``ctxbench.__main__.main(argv)`` through the tests' CLI runner; no peak RSS (the process is shared).

    Nothing can kill it at ``timeout``: a run past it counts as ``timeout`` when it ends (pytest-timeout,
    set per case by the test, stops one that never does)."""
    t0 = time.monotonic()
    p = run_cli(*argv, cwd=cwd, env={**ENV, "CTXBENCH_CACHE": str(work / "cache"), **(env or {})})
    seconds = time.monotonic() - t0
    return {"rc": p.returncode, "timed_out": seconds > timeout, "seconds": round(seconds, 1), "peak_rss_mb": None,
            "stdout": p.stdout, "stderr": p.stderr, "spawned": False}


def last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


# ---- classification --------------------------------------------------------------------------------

def recovered(case: bic.Case, out: str, work: Path) -> bool:
    """The case's recovery check, on the output with the case's folder named ``<work>`` (its path holds the
    case id, which may contain the very word the check looks for)."""
    if case.recovery is None:
        return False
    out = out.replace(str(work), "<work>")
    if callable(case.recovery):
        return bool(case.recovery(out, work))
    return re.search(case.recovery, out) is not None


def names_something(line: str, expect: list[str]) -> bool:
    """The error line names the case's file or key (any of ``expect``; without any: a quote, path or key=)."""
    low = line.lower()
    if expect:
        return any(e.lower() in low for e in expect if e)
    return bool(re.search(r"['\"/=]|\bline \d+|\bfield\b", line))


def classify(case: bic.Case, res: dict[str, Any], work: Path, expect: list[str]) -> tuple[str, str]:
    """(outcome, detail) of one finished command."""
    err, rc = res["stderr"], res["rc"]
    if (work / bic.MARKER).exists():
        return "EXECUTED", f"the payload created {work / bic.MARKER}"
    if res["timed_out"]:
        return "timeout", f"killed after {res['seconds']} s" if res.get("spawned", True) else \
            f"ran {res['seconds']} s, past its {case.timeout or TIMEOUT} s"
    if case.control:
        return ("ok", "") if rc == 0 else ("control_failed", f"exit {rc}")
    if case.mem_bound_mb and res["peak_rss_mb"] is not None and res["peak_rss_mb"] > case.mem_bound_mb:
        return "accepted", f"peak RSS {res['peak_rss_mb']} MiB > bound {case.mem_bound_mb} MiB (exit {rc})"
    if rc == 0:
        if case.ok_if_success and recovered(case, res["stdout"] + "\n" + err, work):
            return "recovered", ""
        return "accepted", "exit 0" + (" (recovery not reported)" if case.ok_if_success else "")
    if rc < 0:
        return "crash", f"killed by signal {-rc}"
    if "Traceback" in err:
        return "traceback", ""
    line = last_line(err)
    if not line.startswith("ctxbench: error:"):
        return "unclear", f"exit {rc}"
    if not names_something(line, expect):
        return "vague", f"names none of {expect}"
    if case.must_recover:
        return "not_recovered", "a clear error where the documented recovery was due"
    return "clear", ""


def expected(case: bic.Case) -> tuple[str, ...]:
    """The outcomes a case may end in: a control succeeds; a malformed input is refused clearly, or
    recovered from where a recovery is documented (and only that where ``must_recover``)."""
    if case.control:
        return ("ok",)
    if case.must_recover:
        return ("recovered",)
    return ("clear", "recovered") if case.ok_if_success else ("clear",)


# ---- the sweep: fixtures (the real runs that run-file cases corrupt) and one case -------------------

FIXTURE_RUNS = {
    "train_one": bic.TRAIN_RUN + ["trainer.stop_after=2", "hydra.run.dir={fixtures}/train_one"],
    "train_two": bic.TRAIN_RUN + ["trainer.stop_after=4", "hydra.run.dir={fixtures}/train_two"],
    "eval_run": [a.replace("{work}/run_cache", "{fixtures}/eval_run_cache") for a in bic.EVAL_RUN]
    + ["limit=2", "hydra.run.dir={fixtures}/eval_run"],
}


@dataclass
class Record:
    """What one case did, and what a failing test prints."""

    case: bic.Case
    command: str
    outcome: str = ""
    detail: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    peak_rss_mb: int | None = None
    spawned: bool = False
    stdout: str = ""
    stderr: str = ""

    def explain(self) -> str:
        tail = "\n".join("    " + ln[:400] for ln in self.stderr.strip().splitlines()[-15:]) or "    (empty)"
        out = "\n".join("    " + ln[:400] for ln in self.stdout.strip().splitlines()[-3:]) or "    (empty)"
        return (f"{self.case.id}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")
                + f", expected {' or '.join(expected(self.case))}: {self.case.description}\n"
                f"  command ({'spawned' if self.spawned else 'in-process'}, exit {self.exit_code}, {self.seconds} s): "
                f"{self.command}\n  stderr tail:\n{tail}\n  stdout tail:\n{out}")

    def as_json(self) -> dict[str, Any]:
        return {"id": self.case.id, "group": self.case.group, "control": self.case.control, "outcome": self.outcome,
                "detail": self.detail, "exit_code": self.exit_code, "seconds": self.seconds,
                "peak_rss_mb": self.peak_rss_mb, "spawned": self.spawned,
                "last_stderr_line": last_line(self.stderr)[:500]}


@dataclass
class Sweep:
    """One sweep: a temp root (``fixtures/``, ``cases/<id>/``), the fake server, the shared data folder, the
    fixture runs (built on first need, in-process, once)."""

    root: Path
    shared: Path = REPO.parent / "shared"
    repo: Path = REPO
    keep: bool = False
    server: FakeServer = field(default_factory=FakeServer)
    built: dict[str, str | None] = field(default_factory=dict)  # fixture -> None (built) or its error
    cache: dict = field(default_factory=dict)                   # the base inputs, read once

    def __post_init__(self) -> None:
        (self.root / "fixtures").mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.server.close()

    def ctx(self) -> dict[str, Any]:
        return {"root": str(self.root), "fixtures": str(self.root / "fixtures"), "shared": str(self.shared),
                "repo": str(self.repo), "host": f"127.0.0.1:{self.server.port}", "_cache": self.cache}

    def base_locomo(self) -> Path:
        """``{fixtures}/base_locomo.json`` (from the shared data; ``SharedDataMissing`` without it)."""
        p = self.root / "fixtures" / "base_locomo.json"
        if not p.exists():
            p.write_text(bic.locomo_text(self.ctx()))
        return p

    def fixture(self, name: str) -> None:
        """Build the fixture run ``name`` once; fails (naming it) when it could not be built."""
        if name not in self.built:
            fx = self.root / "fixtures"
            work = fx / f"_{name}"
            work.mkdir(exist_ok=True)
            if name == "eval_run":
                self.base_locomo()
            vals = dict(self.ctx(), work=str(work), url=self.server.url("ok"))
            argv = [a.format(**vals) for a in FIXTURE_RUNS[name]]
            res = run_in_process(argv, self.repo, work, 600, env={"CTXBENCH_CACHE": str(fx / "cache")})
            self.built[name] = None if res["rc"] == 0 else (
                f"`python -m ctxbench {shlex.join(argv)}` exit {res['rc']}:\n{res['stderr'][-3000:]}")
        if self.built[name] is not None:
            pytest.fail(f"the fixture run {name} failed: {self.built[name]}", pytrace=False)

    def run(self, case: bic.Case) -> Record:
        """Run one case; skips it (naming the file) where it needs the shared data and that is absent."""
        work = self.root / "cases" / case.id
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        vals = dict(self.ctx(), work=str(work), url=self.server.url(case.server))
        argv = [a.format(**vals) for a in case.argv]
        expect = [e.format(**vals) for e in case.expect]
        rec = Record(case, "python -m ctxbench " + shlex.join(argv))
        try:
            try:
                if any("{fixtures}/base_locomo.json" in a for a in case.argv):
                    self.base_locomo()
                for name in case.needs:
                    self.fixture(name)
                if case.make:
                    case.make(work, dict(vals, work=work, fixtures=self.root / "fixtures"))
            except bic.SharedDataMissing as e:
                pytest.skip(f"{case.id} {e}")
            before = repo_state(self.repo)
            runner = run_spawned if must_spawn(case) else run_in_process
            res = runner(argv, self.repo, work, case.timeout or TIMEOUT, case.env)
            rec.outcome, rec.detail = classify(case, res, work, expect)
            new = sorted(set(repo_state(self.repo).splitlines()) - set(before.splitlines()))
            if new and rec.outcome != "EXECUTED":
                rec.outcome, rec.detail = "touched_checkout", "new files in the checkout: " + ", ".join(new)
            rec.exit_code, rec.seconds, rec.peak_rss_mb = res["rc"], res["seconds"], res["peak_rss_mb"]
            rec.spawned, rec.stdout, rec.stderr = res["spawned"], res["stdout"], res["stderr"]
        finally:
            if not self.keep:
                shutil.rmtree(work, ignore_errors=True)
        path = os.environ.get("BAD_INPUT_SWEEP_RECORD")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(rec.as_json()) + "\n")
        return rec


def repo_state(repo: Path) -> str:
    """The untracked and ignored files git sees in the checkout, to check a case wrote none (a run folder,
    a cache, a download). Edits to tracked files are left out: the one editing the checkout meanwhile is you."""
    r = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=repo,
                       capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln[:2] in ("??", "!!")
             and "__pycache__" not in ln and not ln.endswith(".pyc")]
    return "\n".join(sorted(lines))
