"""The client side of ``memory=http``'s protocol (docs/http_protocol.md): a memory that lives in another process.

:class:`RemoteMemory` speaks JSON over HTTP (httpx) to a remote memory system at ``url``: its capabilities,
which sessions of a history it holds (by the fingerprints ctxbench gave it), reset / add a session /
truncate, retrieve or answer for a question, dump its memories. Every request is idempotent by the
protocol's rules, so a transport failure (refused or dropped connection, timeout) and an HTTP 5xx are retried
``retries`` times (backoff doubling from ``backoff_s``); a 4xx, a reply that is not a JSON object or one
without the fields the endpoint owes is not. What still fails is a :class:`RemoteError` whose message is one
line naming the url and the endpoint (no traceback, no secret): ``memory=http`` fails that history with it.

``wait`` is the context a request runs in: the evaluator's workers' lock released (``SharedLLM.released``),
so other histories and questions go on while the remote works, and a remote calling the lent backend
(whose calls need that lock) never waits on the worker waiting for it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from typing import Any, Callable


from ctxbench.core.errors import CtxbenchError
from ctxbench.core.secrets import scrub_text

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1,)
RETRIED_STATUS = frozenset({500, 502, 503, 504})


class RemoteError(CtxbenchError, RuntimeError):
    """A request to the remote memory system failed (after its retries): one line naming url and endpoint."""


def fingerprint(session: dict[str, Any]) -> str:
    """sha256 (hex) of the session's canonical JSON (sorted keys, no spaces, UTF-8): what the remote echoes back."""
    text = json.dumps(session, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


class RemoteMemory:
    """One remote memory system at ``url`` (see the module doc)."""

    def __init__(self, url: str, *, timeout_s: float, retries: int, backoff_s: float,
                 wait: Callable[[], Any] | None = None, secrets: Callable[[], list[str]] | None = None) -> None:
        self.url = str(url).rstrip("/")
        self.retries, self.backoff_s = int(retries), float(backoff_s)
        self.timeout_s = float(timeout_s)
        self.wait = wait or contextlib.nullcontext
        self.secrets = secrets or (lambda: [])
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not one INFO line per request
        # trust_env=False: the remote is addressed as given, never through a proxy of the environment
        import httpx  # here, not at import: the GPU check's Python (registry.discover) has no httpx

        self.http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(self.timeout_s), trust_env=False)

    def close(self) -> None:
        self.http.close()

    # ---- one request ------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                need: tuple[str, ...] = ()) -> dict[str, Any]:
        """The JSON object ``method path`` answers with (``need``: keys it must have), retried as the module
        doc says; a :class:`RemoteError` when it still fails."""
        data = None if body is None else json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        tries = self.retries + 1
        for attempt in range(1, tries + 1):
            retry, why = self._once(method, path, data, headers, need)
            if not retry or attempt == tries:
                break
            time.sleep(self.backoff_s * 2 ** (attempt - 1))
        if isinstance(why, dict):
            return why
        after = f" (after {tries} tries)" if tries > 1 and retry else ""
        raise RemoteError(scrub_text(f"memory=http: {self.url} {method} {path}: {why}{after}", extra=self.secrets()))

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str],
              need: tuple[str, ...]) -> tuple[bool, Any]:
        """(retry?, the reply's JSON object or why it failed)."""
        import httpx

        try:
            with self.wait():
                reply = self.http.request(method, path, content=data, headers=headers)
        except httpx.TimeoutException:
            return True, f"timed out after {self.timeout_s:g} s (memory.timeout_s)"
        except httpx.ConnectError as e:
            return True, f"cannot connect ({_short(e) or 'connection refused'})"
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            return True, f"connection dropped before a complete reply ({_short(e) or type(e).__name__})"
        except httpx.HTTPError as e:
            return True, f"{type(e).__name__}: {_short(e)}"
        if not 200 <= reply.status_code < 300:
            return reply.status_code in RETRIED_STATUS, f"HTTP {reply.status_code}: {self._error_text(reply)}"
        try:
            obj = reply.json()
        except ValueError:
            return False, f"malformed JSON reply: {_short(reply.text, 80)!r}"
        if not isinstance(obj, dict):
            return False, f"the reply is JSON but not an object: {_short(reply.text, 80)!r}"
        missing = [k for k in need if k not in obj]
        if missing:
            return False, f"the reply lacks {', '.join(repr(k) for k in missing)}: {_short(reply.text, 80)!r}"
        return False, obj

    @staticmethod
    def _error_text(reply: Any) -> str:
        """The error body's ``error.message`` (the protocol's error shape), else the body's start."""
        try:
            err = reply.json().get("error")
            if isinstance(err, dict) and err.get("message"):
                code = f"{err['code']}: " if err.get("code") else ""
                return _short(f"{code}{err['message']}")
        except (ValueError, AttributeError):
            pass
        return _short(reply.text, 80) or reply.reason_phrase

    # ---- the endpoints ----------------------------------------------------------------------------
    def capabilities(self) -> dict[str, Any]:
        got = self.request("GET", "/capabilities", need=("protocol_version", "capabilities"))
        caps = got.get("capabilities")
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise RemoteError(f"memory=http: {self.url} GET /capabilities: 'capabilities' must be a list of strings")
        return got

    def held(self, reply: dict[str, Any], method: str, path: str) -> list[str]:
        """The ``sessions`` a reply says the remote holds (fingerprints in order), checked."""
        s = reply.get("sessions")
        if not isinstance(s, list) or not all(isinstance(x, str) for x in s):
            raise RemoteError(f"memory=http: {self.url} {method} {path}: 'sessions' must be a list of fingerprints "
                              f"(strings), got {_short(json.dumps(s, default=str), 60)}")
        return s

    def status(self, history_id: str) -> tuple[list[str], dict[str, Any]]:
        got = self.request("POST", "/status", {"history_id": history_id}, need=("sessions",))
        return self.held(got, "POST", "/status"), got

    def reset(self, history_id: str) -> list[str]:
        return self.held(self.request("POST", "/reset", {"history_id": history_id}, need=("sessions",)),
                         "POST", "/reset")

    def truncate(self, history_id: str, keep: int) -> list[str]:
        got = self.request("POST", "/truncate", {"history_id": history_id, "keep": int(keep)}, need=("sessions",))
        return self.held(got, "POST", "/truncate")

    def add_session(self, body: dict[str, Any]) -> list[str]:
        return self.held(self.request("POST", "/add_session", body, need=("sessions",)), "POST", "/add_session")

    def retrieve(self, body: dict[str, Any]) -> dict[str, Any]:
        got = self.request("POST", "/retrieve", body)
        if "memories" not in got and "context" not in got:
            raise RemoteError(f"memory=http: {self.url} POST /retrieve: the reply has neither 'memories' nor 'context'")
        if "context" in got and not isinstance(got["context"], str):
            raise RemoteError(f"memory=http: {self.url} POST /retrieve: 'context' must be a string")
        memories(got, self.url, "/retrieve")
        return got

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        got = self.request("POST", "/answer", body, need=("text",))
        if not isinstance(got["text"], str):
            raise RemoteError(f"memory=http: {self.url} POST /answer: 'text' must be a string")
        memories(got, self.url, "/answer")
        return got

    def dump(self, history_id: str) -> list[dict[str, Any]]:
        got = self.request("POST", "/dump", {"history_id": history_id}, need=("memories",))
        return memories(got, self.url, "/dump")


def memories(reply: dict[str, Any], url: str, path: str) -> list[dict[str, Any]]:
    """A reply's ``memories`` (absent: []), each an object with a string ``text``."""
    items = reply.get("memories", [])
    if not isinstance(items, list) or not all(isinstance(m, dict) and isinstance(m.get("text"), str) for m in items):
        raise RemoteError(f"memory=http: {url} POST {path}: 'memories' must be a list of objects with a string 'text'")
    return items
