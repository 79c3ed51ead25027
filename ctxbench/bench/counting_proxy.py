"""A logging HTTP proxy in front of an OpenAI-compatible server: one JSON line per call, for side-by-side costs.

Comparing two clients of one server (ctxbench's Mem0 and mem0ai's, say) needs the server's own counts
for each client, not each client's account of itself: :func:`serve` starts a forwarder on ``127.0.0.1``
that sends every ``/v1/*`` request unchanged to ``upstream`` (its ``http://host:port``; a trailing
``/v1`` is dropped) and appends one line to ``log`` per call once the upstream has answered (before
the client has the reply):

``{"side", "t", "method", "path", "status", "seconds", "prompt_tokens", "completion_tokens",
"response_format", "schema", "error"}`` — ``side`` names the client (one proxy per side, each on its
own port, may share one log file), ``t`` the start (Unix seconds), ``seconds`` the upstream's time,
the token counts come from the reply's ``usage`` (``null`` where it has none), ``response_format`` is
the request's ``response_format.type`` (``null`` for a free-text call), ``schema`` whether that
response format carried a schema (``json_schema.schema`` or llama-cpp-python's ``schema`` field), and
``error`` the first :data:`ERROR_CHARS` characters of a reply body with status >= 400 (``null``
otherwise). A server that cannot be reached is answered ``502`` and logged with that status.

Replies go back whole (status, ``Content-Type``, body); streaming is not relayed chunk by chunk, and a
streamed reply's usage is read from its last ``data:`` chunk that has one. :func:`summarize` adds a
log up per side: ``python -m ctxbench.bench.counting_proxy --summary LOG`` prints it as a table.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Iterator

ERROR_CHARS = 400  # of an error reply's body, in its log line
FORWARDED_HEADERS = ("Content-Type", "Authorization", "Accept")


def upstream_root(url: str) -> str:
    """``http://host:port`` of an upstream given with or without its ``/v1`` (and trailing ``/``)."""
    root = url.rstrip("/")
    return root[:-3].rstrip("/") if root.endswith("/v1") else root


def request_format(raw: bytes) -> tuple[str | None, bool]:
    """The request's ``response_format.type`` and whether it carries a schema (``(None, False)``: free text)."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return None, False
    fmt = body.get("response_format") if isinstance(body, dict) else None
    if not isinstance(fmt, dict):
        return None, False
    inner = fmt.get("json_schema")
    schema = isinstance(fmt.get("schema"), dict) or (isinstance(inner, dict) and isinstance(inner.get("schema"), dict))
    return (str(fmt["type"]) if fmt.get("type") is not None else None), schema


def reply_usage(body: bytes) -> tuple[int | None, int | None]:
    """Prompt and completion tokens from a reply's ``usage`` (a JSON reply, or the last streamed chunk with one)."""
    docs: list[Any] = []
    try:
        docs.append(json.loads(body))
    except ValueError:
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    docs.append(json.loads(line[5:]))
                except ValueError:
                    pass
    for doc in reversed(docs):
        usage = doc.get("usage") if isinstance(doc, dict) else None
        if isinstance(usage, dict):
            def count(key: str) -> int | None:
                v = usage.get(key)
                return v if isinstance(v, int) and not isinstance(v, bool) else None
            return count("prompt_tokens"), count("completion_tokens")
    return None, None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


class CountingProxy:
    """The running proxy: ``base_url`` (``http://127.0.0.1:PORT/v1``, what a client takes), ``calls`` logged."""

    def __init__(self, upstream: str, log: str | Path, side: str = "default", port: int = 0,
                 timeout_s: float = 900.0):
        self.upstream, self.side, self.timeout_s = upstream_root(upstream), str(side), float(timeout_s)
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.calls = 0
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", int(port)), self._handler())
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="counting-proxy", daemon=True)

    def start(self) -> "CountingProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def forward(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, str, bytes]:
        """Send one request upstream: its status, ``Content-Type`` and body (``502`` where none came back)."""
        req = urllib.request.Request(self.upstream + path, data=raw if method == "POST" else None,
                                     headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.headers.get("Content-Type", "application/json"), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", "application/json"), e.read()
        except (urllib.error.URLError, OSError) as e:  # refused, reset, timed out: the client sees a 502
            reason = getattr(e, "reason", e)
            body = json.dumps({"error": {"message": f"counting proxy: upstream {self.upstream} gave no reply: {reason}"}})
            return 502, "application/json", body.encode()

    def record(self, method: str, path: str, raw: bytes, status: int, body: bytes, t0: float, seconds: float) -> None:
        """Append the call's line to the log (one write under the lock: lines never interleave)."""
        prompt, completion = reply_usage(body) if status < 400 else (None, None)
        fmt, schema = request_format(raw) if method == "POST" else (None, False)
        line = {"side": self.side, "t": round(t0, 3), "method": method, "path": path, "status": status,
                "seconds": round(seconds, 4), "prompt_tokens": prompt, "completion_tokens": completion,
                "response_format": fmt, "schema": schema,
                "error": body[:ERROR_CHARS].decode("utf-8", "replace") if status >= 400 else None}
        with self._lock:
            with self.log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
            self.calls += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # the JSON log is the record; no stderr line per call
                pass

            def relay(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else b""
                if not (self.path == "/v1" or self.path.startswith("/v1/")):
                    self.reply(404, "application/json",
                               json.dumps({"error": {"message": f"counting proxy: no route {self.path}"}}).encode())
                    return
                headers = {h: self.headers[h] for h in FORWARDED_HEADERS if self.headers.get(h)}
                t0 = time.time()
                start = time.perf_counter()
                status, ctype, body = proxy.forward(method, self.path, headers, raw)
                seconds = time.perf_counter() - start
                proxy.record(method, self.path, raw, status, body, t0, seconds)  # logged before the client has it
                self.reply(status, ctype, body)

            def reply(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.relay("GET")

            def do_POST(self) -> None:
                self.relay("POST")

        return Handler


@contextmanager
def serve(upstream: str, log: str | Path, side: str = "default", port: int = 0,
          timeout_s: float = 900.0) -> Iterator[CountingProxy]:
    """A :class:`CountingProxy` running for the ``with`` block; ``port`` 0 = an ephemeral one."""
    proxy = CountingProxy(upstream, log, side=side, port=port, timeout_s=timeout_s).start()
    try:
        yield proxy
    finally:
        proxy.close()


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The log's lines as dicts (a line cut by a killed proxy is skipped)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def summarize(lines: Iterable[dict[str, Any]], since: float | None = None,
              until: float | None = None) -> dict[str, dict[str, Any]]:
    """Per side, the chat calls (``POST .../chat/completions``) started in ``[since, until)``: ``calls``,
    ``errors`` (status >= 400), ``prompt_tokens``, ``completion_tokens``, ``structured`` (calls with a
    ``response_format``) and ``seconds`` (the upstream's time, added up)."""
    sides: dict[str, dict[str, Any]] = {}
    for ln in lines:
        if ln.get("method") != "POST" or not str(ln.get("path", "")).rstrip("/").endswith("/chat/completions"):
            continue
        if (since is not None and ln["t"] < since) or (until is not None and ln["t"] >= until):
            continue
        s = sides.setdefault(ln["side"], {"calls": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                          "structured": 0, "seconds": 0.0})
        s["calls"] += 1
        s["errors"] += int(ln["status"] >= 400)
        s["prompt_tokens"] += ln.get("prompt_tokens") or 0
        s["completion_tokens"] += ln.get("completion_tokens") or 0
        s["structured"] += int(ln.get("response_format") is not None)
        s["seconds"] += ln.get("seconds") or 0.0
    return sides


def _interrupt(*_: Any) -> None:
    """SIGTERM stops the proxy as Ctrl-C does (a script's ``kill PID`` gets the closing line)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """``python -m ctxbench.bench.counting_proxy --upstream http://127.0.0.1:8091 --port 8092 --log calls.jsonl
    [--side ctxbench]``: forward and log until Ctrl-C or SIGTERM; ``--summary LOG``: the log's calls per side."""
    import argparse
    import signal

    from ctxbench.core.markdown_table import md_table

    ap = argparse.ArgumentParser(prog="python -m ctxbench.bench.counting_proxy", description=main.__doc__)
    ap.add_argument("--upstream", help="the server's http://host:port (a trailing /v1 is dropped)")
    ap.add_argument("--port", type=int, default=8092, help="port on 127.0.0.1 (default 8092; 0 = any free one)")
    ap.add_argument("--log", help="JSON-lines file the calls are appended to")
    ap.add_argument("--side", default="default", help="the name logged with each call (default 'default')")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one upstream call may take (default 900)")
    ap.add_argument("--summary", metavar="LOG", help="print the chat calls of LOG per side, then exit")
    args = ap.parse_args(argv)
    if args.summary:
        sides = summarize(read_log(args.summary))
        keys = ["calls", "errors", "structured", "prompt_tokens", "completion_tokens", "seconds"]
        print(md_table(["side", *keys], [[name, *(s[k] for k in keys)] for name, s in sorted(sides.items())], digits=1))
        return
    if not args.upstream or not args.log:
        ap.error("--upstream and --log are needed to serve (or --summary LOG to read a log)")
    signal.signal(signal.SIGTERM, _interrupt)
    with serve(args.upstream, args.log, side=args.side, port=args.port, timeout_s=args.timeout) as proxy:
        print(f"counting proxy [{proxy.side}]: {proxy.base_url} -> {proxy.upstream}, logging to {proxy.log}; "
              "Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"counting proxy [{proxy.side}]: {proxy.calls} calls logged", flush=True)


if __name__ == "__main__":
    main()
