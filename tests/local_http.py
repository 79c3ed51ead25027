"""A threaded HTTP server on 127.0.0.1 for tests of the OpenAI-compatible backend.

Subclass :class:`LocalServer`, build a ``BaseHTTPRequestHandler`` class in ``__init__`` and call
``self.serve(Handler)``; ``url`` is the ``/v1`` base URL, ``close()`` stops the server.
"""
from __future__ import annotations

import threading
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
