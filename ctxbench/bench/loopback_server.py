"""A loopback OpenAI-compatible chat server with a fixed latency and N parallel slots, for benchmarks.

Measuring how fast the evaluator drives a backend needs a backend whose own speed is known and
stable: :func:`serve` starts one on ``127.0.0.1`` (an ephemeral port) in this process and yields a
:class:`LoopbackServer` whose ``base_url`` (``http://127.0.0.1:PORT/v1``) is what ``llm=openai``
takes (``llm.model=loopback llm.api_key_env=null``).

* ``POST /v1/chat/completions`` waits for one of ``slots`` slots (a semaphore: request
  ``slots + 1`` waits its turn, like a llama.cpp or vLLM server with N parallel sequences), sleeps
  ``delay_s`` holding it, and answers with ``finish_reason: "stop"`` and ``usage`` (prompt tokens =
  whitespace words of every message, completion tokens = words of the reply). The reply text is a
  function of the request alone — by default the last 3 words of the last user message — so a
  run's results do not depend on the order in which concurrent calls complete. ``reply(body)``
  (the parsed request) replaces it; a ``reply`` that raises :class:`HTTPError` is answered with that
  status and ``{"error": {"message": ...}}`` (a server refusing a request, or overloaded). A reply longer than the request's ``max_tokens`` words is cut
  there with ``finish_reason: "length"``.
* Structured calls (``response_format`` json_schema or json_object) get the text ``{}``: valid JSON,
  but *not* a value checked against the schema (a schema with required fields fails its check in
  the caller, which is what a benchmark of throughput may ignore; pass ``reply`` for more).
* ``GET /v1/models`` lists one model, ``loopback`` (preflight passes). The model name of a call is
  not checked.

``requests`` counts the chat requests answered, ``peak_in_flight`` the most served at once (at
most ``slots``). Nothing is logged per request.
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

MODEL = "loopback"
REPLY_WORDS = 3  # words of the last user message in the default reply


class HTTPError(Exception):
    """Raised by a ``reply``: the request is answered with HTTP ``status`` and ``{"error": {"message": message}}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = int(status), message


def default_reply(body: dict[str, Any]) -> str:
    """``{}`` for a structured call, else the last :data:`REPLY_WORDS` words of the last user message."""
    if isinstance(body.get("response_format"), dict):
        return "{}"
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    words = str(users[-1].get("content") or "").split() if users else []
    return " ".join(words[-REPLY_WORDS:]) or "ok"


def words(text: Any) -> int:
    return len(str(text or "").split())


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a kept-alive connection's thread does not hold up close()
    request_queue_size = 256  # listen backlog: the default 5 drops the SYNs of a burst of new connections
                              # (each dropped one costs a 1 s retransmit)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone before its reply (killed, timed out) is not an error worth a traceback."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class LoopbackServer:
    """The running server: ``base_url``, ``requests`` (answered), ``in_flight``, ``peak_in_flight``."""

    def __init__(self, delay_s: float = 0.05, slots: int = 4,
                 reply: Callable[[dict[str, Any]], str] | None = None, port: int = 0):
        if slots < 1:
            raise ValueError(f"slots={slots}: a server needs at least one slot")
        if delay_s < 0:
            raise ValueError(f"delay_s={delay_s}: a delay cannot be negative")
        self.delay_s, self.slots, self.reply = float(delay_s), int(slots), reply or default_reply
        self.requests = self.in_flight = self.peak_in_flight = 0
        self._slots = threading.Semaphore(self.slots)
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", int(port)), self._handler())
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-server", daemon=True)

    def start(self) -> "LoopbackServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion for one request, after waiting for a slot and ``delay_s`` in it."""
        with self._slots:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                time.sleep(self.delay_s)
                text = str(self.reply(body))
            finally:
                with self._lock:
                    self.in_flight -= 1
                    self.requests += 1
        finish, limit = "stop", body.get("max_tokens")
        if isinstance(limit, int) and 0 < limit < words(text):
            text, finish = " ".join(text.split()[:limit]), "length"
        prompt = sum(words(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict))
        return {"id": "chatcmpl-loopback", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": words(text),
                          "total_tokens": prompt + words(text)}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers: no connection setup per call
            disable_nagle_algorithm = True  # else headers and body, two writes, wait ~40 ms for a delayed ACK

            def log_message(self, *args: Any) -> None:  # quiet: no line per request on stderr
                pass

            def send_json(self, status: int, obj: Any) -> None:
                payload = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self.send_json(404, {"error": {"message": f"no route GET {self.path}"}})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_json(404, {"error": {"message": f"no route POST {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                    if not isinstance(body, dict):
                        raise ValueError("the request is not a JSON object")
                except ValueError as e:
                    self.send_json(400, {"error": {"message": f"bad request: {e}"}})
                    return
                try:
                    reply = server.answer(body)
                except HTTPError as e:
                    self.send_json(e.status, {"error": {"message": e.message}})
                    return
                except Exception as e:  # a custom reply() that raised: the client sees a 500, the run says why
                    self.send_json(500, {"error": {"message": f"reply failed: {type(e).__name__}: {e}"}})
                    return
                self.send_json(200, reply)

        return Handler


@contextmanager
def serve(delay_s: float = 0.05, slots: int = 4, reply: Callable[[dict[str, Any]], str] | None = None,
          port: int = 0) -> Iterator[LoopbackServer]:
    """A :class:`LoopbackServer` running for the ``with`` block (its ``base_url`` is the ``llm.base_url``);
    ``port`` 0 = an ephemeral one."""
    server = LoopbackServer(delay_s=delay_s, slots=slots, reply=reply, port=port).start()
    try:
        yield server
    finally:
        server.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m ctxbench.bench.loopback_server [--delay 0.2] [--slots 8] [--port 8090]``: serve until Ctrl-C
    (to time a whole ``eval`` against it: ``llm=openai llm.model=loopback llm.base_url=<printed url>
    llm.api_key_env=null``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ctxbench.bench.loopback_server", description=main.__doc__)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds per call (default 0.2)")
    ap.add_argument("--slots", type=int, default=8, help="calls served at once (default 8)")
    ap.add_argument("--port", type=int, default=8090, help="port on 127.0.0.1 (default 8090; 0 = any free one)")
    args = ap.parse_args(argv)
    with serve(delay_s=args.delay, slots=args.slots, port=args.port) as server:
        print(f"loopback server: {server.base_url} ({args.delay:g} s per call, {args.slots} slots); Ctrl-C stops it",
              flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"loopback server: {server.requests} requests answered, at most {server.peak_in_flight} at once")


if __name__ == "__main__":
    main()
