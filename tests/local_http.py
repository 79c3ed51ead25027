"""A threaded HTTP server on 127.0.0.1 for tests of the OpenAI-compatible backend.

Subclass :class:`LocalServer`, build a ``BaseHTTPRequestHandler`` class in ``__init__`` and call
``self.serve(Handler)``; ``url`` is the ``/v1`` base URL, ``close()`` stops the server.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer:
    httpd: ThreadingHTTPServer
    url: str

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RawServer:
    """A socket server on 127.0.0.1 that answers each HTTP request with raw bytes of its own:
    ``respond(sock, n)`` writes whatever it likes (a cut body, a trickle, garbage) for the ``n``-th
    request (0-based) and the connection is closed after it. ``requests`` counts the requests."""

    def __init__(self, respond):
        import socket

        self.respond, self.requests = respond, 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                got = conn.recv(65536)
                if not got:
                    return
                head += got
            head, _, body = head.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                got = conn.recv(65536)
                if not got:
                    return
                body += got
            n, self.requests = self.requests, self.requests + 1
            try:
                self.respond(conn, n)
            except OSError:  # the client gave up first (a timeout): nothing to tell
                pass

    def close(self) -> None:
        self.sock.close()


@contextmanager
def servers(cls):
    """A factory of ``cls(...)`` servers for one test, every one closed afterwards (a fixture's body)."""
    made: list = []

    def make(*args):
        made.append(cls(*args))
        return made[-1]

    try:
        yield make
    finally:
        for s in made:
            s.close()


def send_json_bytes(handler: BaseHTTPRequestHandler, payload: bytes, status: int = 200) -> None:
    """Answer ``handler``'s request with ``payload`` as an application/json body."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
