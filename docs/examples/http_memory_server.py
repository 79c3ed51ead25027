#!/usr/bin/env python3
"""A reference memory server for ctxbench's ``memory=http`` protocol, version 1 (docs/http_protocol.md).

Standard library only and no ctxbench import, so it reads as a template for a server in any language.
The memory is deliberately simple and real: it keeps every turn it is given, as "[date] speaker: text", and
retrieves the k turns that share the most words with the question (newer first among equals; the newest k
when none shares a word). In answer mode it shows those turns to the LLM that ctxbench lends it (the
``backend`` of the request: an OpenAI-compatible ``/chat/completions``), so its calls are counted by ctxbench.

    python docs/examples/http_memory_server.py --port 8765 [--state memory.json]
    python -m ctxbench eval memory=http memory.url=http://127.0.0.1:8765 dataset=locomo_sample

``--state FILE`` keeps the memory across restarts (written atomically after every change); without it a
restarted server holds nothing and ctxbench feeds it again. ``--port 0`` takes a free port; the first line
printed is ``listening on http://HOST:PORT``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROTOCOL_VERSION = 1
NAME, VERSION = "turns-reference", "1.0"
CAPABILITIES = ["retrieve", "answer", "dump", "truncate"]
STOPWORDS = set("a an and are as at be did do does for from had has have how i in is it of on or that the to "
                "was were what when where which who why with you your".split())
ANSWER_SYSTEM = ("You answer a question about a conversation from the memories given. "
                 "Answer in a few words. If the memories do not say, answer: Not mentioned in the conversation.")


class ProtocolError(Exception):
    """A request the protocol refuses: an HTTP status, an error code and a message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in STOPWORDS}


class TurnMemory:
    """Every turn of every session, per history; sessions held in order with the fingerprints ctxbench gave."""

    def __init__(self, state_path: str | None = None):
        self.lock = threading.Lock()
        self.state_path = state_path
        self.histories: dict[str, list[dict[str, Any]]] = {}  # history id -> [{"fingerprint", "session"}]
        if state_path and os.path.exists(state_path):
            with open(state_path, encoding="utf-8") as f:
                self.histories = json.load(f)

    def _save(self) -> None:
        if not self.state_path:
            return
        tmp = f"{self.state_path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.histories, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    def held(self, hid: str) -> list[str]:
        return [s["fingerprint"] for s in self.histories.get(hid, [])]

    def reset(self, hid: str) -> None:
        with self.lock:
            self.histories.pop(hid, None)
            self._save()

    def truncate(self, hid: str, keep: int) -> None:
        with self.lock:
            if hid in self.histories:
                del self.histories[hid][keep:]
                self._save()

    def add_session(self, hid: str, index: int, fp: str, session: dict[str, Any]) -> None:
        with self.lock:
            sessions = self.histories.setdefault(hid, [])
            if index < len(sessions):
                if sessions[index]["fingerprint"] == fp:
                    return  # a retried request: already held
                raise ProtocolError(409, "conflict", f"session {index} of {hid!r} is held with another fingerprint")
            if index > len(sessions):
                raise ProtocolError(409, "out_of_order", f"session {index} of {hid!r} sent while {len(sessions)} "
                                                         "are held (sessions come in order)")
            sessions.append({"fingerprint": fp, "session": session})
            self._save()

    def memories(self, hid: str) -> list[dict[str, Any]]:
        """Every turn as a memory, oldest first: text, and where it came from (session, turns)."""
        out = []
        for held in self.histories.get(hid, []):
            s = held["session"]
            head = f"[{s['date']}] " if s.get("date") else ""
            for t in s["turns"]:
                text = f"{head}{t['speaker']}: {t['text']}" if t.get("speaker") else f"{head}{t['text']}"
                out.append({"text": text, "session": s["id"], "turns": [t["id"]] if t.get("id") else []})
        return out

    def retrieve(self, hid: str, question: str, k: int) -> list[dict[str, Any]]:
        """The k memories sharing the most words with ``question``, newer first among equals; the newest k
        when none shares a word."""
        mems = self.memories(hid)
        q = words(question)
        scored = [(len(q & words(m["text"])), i) for i, m in enumerate(mems)]
        hits = sorted(((s, i) for s, i in scored if s > 0), key=lambda si: (-si[0], -si[1]))
        if not hits:
            hits = [(0, i) for i in range(len(mems) - 1, -1, -1)]
        return [dict(mems[i], score=float(s)) for s, i in hits[:k]]


def chat(backend: dict[str, Any], messages: list[dict[str, str]], max_tokens: int, timeout: float) -> dict[str, Any]:
    """One call of the lent backend's OpenAI-compatible /chat/completions: {"text", "usage"}."""
    body = json.dumps({"model": backend["model"], "messages": messages, "max_tokens": max_tokens,
                       "temperature": 0}).encode("utf-8")
    req = urllib.request.Request(backend["base_url"].rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {backend['api_key']}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            reply = json.loads(r.read().decode("utf-8"))
        return {"text": reply["choices"][0]["message"]["content"] or "", "usage": reply.get("usage") or {}}
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as e:
        # never echo the token: the message names the endpoint and the failure only
        raise ProtocolError(502, "backend_failed", f"the lent backend's /chat/completions failed: {type(e).__name__}")


class Handler(BaseHTTPRequestHandler):
    """Routes the protocol's endpoints to the server's :class:`TurnMemory` (``self.server.memory``)."""

    protocol_version = "HTTP/1.1"  # keep-alive: ctxbench's client reuses its connection
    disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms delayed-ACK stall per request)

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet; a real server would log (never the token)
        pass

    def do_GET(self) -> None:
        self.reply(*self.handle_json("GET", self.path, None))

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            self.reply(400, {"error": {"code": "bad_request", "message": "the body is not JSON"}})
            return
        self.reply(*self.handle_json("POST", self.path, body))

    def handle_json(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        try:
            return 200, self.route(method, path, body)
        except ProtocolError as e:
            return e.status, {"error": {"code": e.code, "message": e.message}}
        except (KeyError, TypeError, ValueError) as e:  # a field missing or of the wrong type
            return 400, {"error": {"code": "bad_request", "message": f"{type(e).__name__}: {e}"}}
        except Exception as e:  # noqa: BLE001 - a server bug is a 500 with its class, never a dropped connection
            return 500, {"error": {"code": "internal", "message": f"{type(e).__name__}: {e}"}}

    def route(self, method: str, path: str, body: Any) -> dict[str, Any]:
        mem: TurnMemory = self.server.memory  # type: ignore[attr-defined]
        if method == "GET" and path == "/capabilities":
            return {"protocol_version": PROTOCOL_VERSION, "name": NAME, "version": VERSION,
                    "capabilities": CAPABILITIES}
        if method != "POST" or path not in ENDPOINTS:
            raise ProtocolError(404, "not_found", f"no endpoint {method} {path}")
        if not isinstance(body, dict) or not isinstance(body.get("history_id"), str):
            raise ProtocolError(400, "bad_request", "the body must be an object with a string history_id")
        hid = body["history_id"]
        if path == "/reset":
            mem.reset(hid)
        elif path == "/truncate":
            mem.truncate(hid, int(body["keep"]))
        elif path == "/add_session":
            mem.add_session(hid, int(body["session_index"]), str(body["fingerprint"]), body["session"])
        elif path == "/dump":
            return {"history_id": hid, "memories": mem.memories(hid)}
        elif path == "/retrieve":
            k = int(body.get("k") or 10)
            mems = mem.retrieve(hid, body["question"]["text"], k)
            return {"memories": mems, "stored": len(mem.memories(hid))}
        elif path == "/answer":
            return self.answer(mem, hid, body)
        return {"history_id": hid, "sessions": mem.held(hid), "memory_items": len(mem.memories(hid))}

    def answer(self, mem: TurnMemory, hid: str, body: dict[str, Any]) -> dict[str, Any]:
        backend = body.get("backend")
        if not isinstance(backend, dict):
            raise ProtocolError(400, "no_backend", "answer mode calls the backend ctxbench lends; the request has none")
        mems = mem.retrieve(hid, body["question"]["text"], int(body.get("k") or 10))
        context = "\n".join(m["text"] for m in mems)
        user = f"Memories:\n{context}\n\nQuestion: {body['question']['text']}\nAnswer:"
        got = chat(backend, [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}],
                   int(body.get("max_tokens") or 32), timeout=float(self.server.backend_timeout))  # type: ignore[attr-defined]
        return {"text": got["text"], "context": context, "memories": mems, "usage": got["usage"]}

    def reply(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ENDPOINTS = ("/status", "/reset", "/truncate", "/add_session", "/retrieve", "/answer", "/dump")


def make_server(host: str = "127.0.0.1", port: int = 0, state: str | None = None,
                handler: type[BaseHTTPRequestHandler] = Handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.memory = TurnMemory(state)  # type: ignore[attr-defined]
    server.backend_timeout = 120.0  # type: ignore[attr-defined]
    return server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="0 = a free port")
    p.add_argument("--state", default=None, help="a JSON file keeping the memory across restarts")
    args = p.parse_args(argv)
    server = make_server(args.host, args.port, args.state)
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
