"""The lent backend's HTTP server: aiohttp on ``127.0.0.1`` (a free port), in a thread of its own.

``with LendServer(llm, embedder, accounts) as server:`` serves until the block ends (also on errors);
``server.base_url`` is what an OpenAI client takes. ``llm`` is the run's shared backend (anything with
``chat(messages, phase=..., ...)``, ``model_name``, ``context_window``), ``embedder`` anything with the
``encode(texts) -> rows`` of the memory stores (None: ``/v1/embeddings`` answers 404), ``accounts(token)``
the account a bearer token names (None: 401). An account runs a call for the system it was handed to:

    account.run(call, in_call)   # call(phase) -> result, made as that system's own call; in_call: an LLM
                                 # call (the borrower's worker counts as waiting on the backend meanwhile)

Blocking work (the backend's calls, the embedder) runs on a thread pool, never on the event loop, so
calls the borrowers make side by side reach the backend side by side (``llm=hf`` batches them as a
built-in's). Every error is OpenAI's JSON (:class:`~.wire.ApiError`): 401 for a token this run did not
hand out, 400 naming the bad field, 404 for an unknown route or model, 502 when the backend's call failed
(counted as a failed call, as a built-in's; sent with ``x-should-retry: false``, ctxbench's backend has
retried already), 503 when the backend cannot be used at all (the run stops with that error), 500 for
anything else. No message carries a secret: each is scrubbed as a reply is. No request is logged.
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ctxbench.core.secrets import scrub_text
from ctxbench.llm.base import LLMUnavailable
from ctxbench.llm.lend import wire
from ctxbench.llm.lend.wire import ApiError

HOST = "127.0.0.1"
MAX_BODY_BYTES = 64 * 2**20  # a whole long history in one prompt fits
CALL_THREADS = 128  # calls in flight at once; more than any run's workers times a borrower's own parallelism
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def embedder_name(embedder: Any) -> str | None:
    """The name ``/v1/embeddings`` serves the embedder under (its ``name``, else its class's); None: no embedder."""
    if embedder is None:
        return None
    return str(getattr(embedder, "name", None) or type(embedder).__name__)


QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "aiohttp.access")


class LendServer:
    """See the module doc. ``requests`` counts the answered requests per route (and ``refused``)."""

    def __init__(self, llm: Any, embedder: Any, accounts: Callable[[str], Any]):
        self.llm, self.embedder, self.accounts = llm, embedder, accounts
        self.model = str(llm.model_name)
        self.embedding_model = embedder_name(embedder)
        self.base_url = ""
        self.requests = {"chat": 0, "embeddings": 0, "models": 0, "refused": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._runner: Any = None

    # ---- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> "LendServer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns (and sets) ``base_url``."""
        for name in QUIET_LOGGERS:  # a borrower's HTTP client logs every request at INFO: not in the run's log
            logging.getLogger(name).setLevel(logging.WARNING)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        self.base_url = f"http://{HOST}:{sock.getsockname()[1]}/v1"
        self._pool = ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix="ctxbench-lend-call")
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = self._loop
            assert loop is not None
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open(sock))
            except BaseException as e:  # reported by start()
                failed.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="ctxbench-lend", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S) or failed:
            sock.close()
            raise RuntimeError(f"the lent backend did not start on {self.base_url}: "
                               f"{failed[0] if failed else 'timed out'}")
        return self.base_url

    def stop(self) -> None:
        """Stop serving (requests still open are cut) and free the port."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _open(self, sock: socket.socket) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._error_middleware()])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    # ---- routes ------------------------------------------------------------------------------
    async def _chat(self, request: Any) -> Any:
        account = self._account(request)
        body = await self._body(request)
        model = wire.check_model(body, [self.model])
        req = wire.chat_request(body, int(self.llm.context_window))
        out: dict[str, Any] = {}

        def call(phase: str) -> Any:
            out["phase"] = phase
            return self.llm.chat(req.messages, phase=phase, **req.params)

        r = await self._blocking(account, call, True)
        if r.failed:  # counted as the borrower's failed call, as a built-in's
            raise ApiError(502, self._scrub(f"the backend's call failed: {r.error or 'no reply'}"),
                           type="server_error", code="backend_failed", retry=False)
        self.requests["chat"] += 1
        return self._json(wire.completion(r, model, out["phase"]))

    async def _embeddings(self, request: Any) -> Any:
        account = self._account(request)
        body = await self._body(request)
        if self.embedder is None:
            raise ApiError(404, "this run has no embedder to lend (the memory system's config chooses one: "
                                "embedder=minilm)", param="model", code="model_not_found")
        model = wire.check_model(body, [str(self.embedding_model)])
        texts, fmt = wire.embedding_inputs(body, getattr(self.embedder, "dim", None))
        rows = await self._blocking(account, lambda phase: self.embedder.encode(texts), False)
        self.requests["embeddings"] += 1
        return self._json(wire.embeddings(rows, model, fmt))

    async def _models(self, request: Any) -> Any:
        self._account(request)
        self.requests["models"] += 1
        return self._json(wire.models([n for n in (self.model, self.embedding_model) if n]))

    # ---- plumbing ----------------------------------------------------------------------------
    def _account(self, request: Any) -> Any:
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        account = self.accounts(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if account is None:
            raise ApiError(401, "the bearer token is not one this run lent (LentBackend.api_key)",
                           type="invalid_request_error", code="invalid_api_key")
        return account

    @staticmethod
    async def _body(request: Any) -> dict[str, Any]:
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            raise wire.bad("body", "not JSON") from None
        if not isinstance(body, dict):
            raise wire.bad("body", "expected a JSON object")
        return body

    async def _blocking(self, account: Any, call: Callable[[str], Any], in_call: bool) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, account.run, call, in_call)
        except ApiError:
            raise
        except LLMUnavailable as e:  # the run stops with it (the account raises it in the borrower's task)
            raise ApiError(503, self._scrub(str(e)), type="server_error", code="backend_unavailable",
                           retry=False) from None
        except Exception as e:
            raise ApiError(500, self._scrub(f"the backend's call raised {type(e).__name__}: {e}"),
                           type="server_error", code="backend_error", retry=False) from None

    def _scrub(self, text: str) -> str:
        known = getattr(self.llm, "known_secrets", None)
        return scrub_text(text, extra=known() if callable(known) else [])

    @staticmethod
    def _json(obj: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Any:
        from aiohttp import web

        return web.json_response(obj, status=status, headers=headers)

    def _error_middleware(self) -> Any:
        from aiohttp import web

        server = self

        @web.middleware
        async def errors(request: Any, handler: Any) -> Any:
            try:
                return await handler(request)
            except ApiError as e:
                server.requests["refused"] += 1
                headers = {} if e.retry is None else {"x-should-retry": "true" if e.retry else "false"}
                return server._json(e.body(), e.status, headers)
            except web.HTTPException as e:  # no such route / method: OpenAI's error shape too
                server.requests["refused"] += 1
                err = ApiError(e.status, f"no route {request.method} {request.path} (the lent backend serves "
                                         "POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models)",
                               code="not_found" if e.status == 404 else "method_not_allowed")
                return server._json(err.body(), e.status)

        return errors
