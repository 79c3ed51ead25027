"""llm=openai's transport (httpx): calls reuse a keep-alive connection; a dropped one is retried."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from tests.test_llm_failures import MSGS, make_llm, reply

from local_http import LocalServer, send_json_bytes


class KeepAliveServer(LocalServer):
    """An HTTP/1.1 server noting the client (address, port) of every POST; ``drop`` closes the
    connection of that many POSTs without a reply (a server or proxy cutting a pooled connection)."""

    def __init__(self, drop: int = 0):
        self.clients, self.drop = [], drop
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.clients.append(self.client_address)
                if outer.drop:
                    outer.drop -= 1
                    self.close_connection = True
                    return
                payload = reply("In France")
                send_json_bytes(self, payload)

        self.serve(Handler)


def test_calls_reuse_one_keep_alive_connection(monkeypatch):
    s = KeepAliveServer()
    try:
        llm = make_llm(s.url, monkeypatch)
        assert [llm.chat(MSGS).text for _ in range(5)] == ["In France"] * 5
        assert len(s.clients) == 5 and len(set(s.clients)) == 1  # one TCP connection for all five calls
    finally:
        s.close()


def test_a_connection_dropped_without_a_reply_is_retried(monkeypatch):
    s = KeepAliveServer(drop=1)
    try:
        llm = make_llm(s.url, monkeypatch, backoff_s=0.01, backoff_max_s=0.02)
        r = llm.chat(MSGS)  # before any success, too: a drop is not "unreachable"
        assert (r.text, r.failed) == ("In France", False) and len(s.clients) == 2
    finally:
        s.close()

