"""``llm=openai``: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp server, ...).

``llm.base_url`` + ``/chat/completions``; the API key is read from the environment variable
*named* by ``llm.api_key_env`` (never stored in a config or a results file; ``api_key_env: null``
sends no key, for local servers). Each call has a timeout.

Transport: one ``httpx.Client`` per backend (thread-safe, keep-alive: calls reuse connections
instead of a TCP/TLS handshake each). The retry policy below is ours, not a library's: httpx's
transport retries only failed connects — exactly what must fail at once before a first success —
and the ``openai`` SDK retries connection errors too, does not retry malformed replies, and parses
replies into models that would blur ``content: null``; with its retries off it would be httpx plus
a heavy dependency.

What happens when a call goes wrong:

* the backend cannot work at all — server unreachable (connection refused, host not found)
  before any call has succeeded, HTTP 401/403 (key refused), HTTP 404 (unknown model or wrong
  ``base_url`` path): :class:`~ctxbench.llm.base.LLMUnavailable` at once, one line naming the
  cause, no retries;
* 429, 5xx, timeouts, malformed replies (not JSON, HTML, no ``choices``, ``choices: []``, content
  that is not a string, content that is not valid Unicode — a lone surrogate such as JSON
  ``"\\ud800"``, which no file or cache could hold), a connection cut mid-reply (fewer bytes than its
  ``Content-Length``), a reply trickled so slowly it is not complete within ``timeout_s``, and a lost
  connection once the server has answered before (it may be restarting): retried with exponential
  backoff (honouring a Retry-After of plain ASCII seconds or an HTTP date; any other value — ``1e3``,
  ``inf``, ``-5``, other scripts' digits — is ignored), up to ``max_retries`` retries; then the call returns
  ``ChatResult(failed=True)`` with a one-line ``error`` and is counted as a failure — the run goes on;
* a deterministic refusal — any other 4xx, or a 5xx whose body names the request as invalid
  (:mod:`.refusal`: ``Input should be ...``, ``validation error``, ``unsupported`` ...) — a redirect
  (not followed: ``base_url`` should be the final address), a reply over :data:`REPLY_BYTES` and a
  reply without content (``content: null``): that call fails at once; the retries a refused 5xx
  would have cost are counted in ``retries_saved`` (results.json ``llm.retries_saved``);
* ``max_consecutive_failures`` failed calls in a row: ``LLMUnavailable`` naming the last error.

Every error text is scrubbed of the key (and other secrets) before it is stored or raised, and so
is every reply's text (:meth:`OpenAIChatLLM.scrub_reply`: the key this backend sends, whatever
variable holds it, the password of ``base_url``, secret environment variables' values, key-shaped
strings) before the call cache or the caller sees it: a server that echoes the key writes it nowhere.
The model a reply says answered (its ``model``) is kept in ``ChatResult.served_model`` and counted
per name (results.json ``llm.served_models``); one that is not ``llm.model`` (nor a dated snapshot of
it, ``gpt-4o-mini-2024-07-18`` for ``gpt-4o-mini``) prints one warning.
:meth:`OpenAIChatLLM.preflight` checks ``GET {base_url}/models`` (reachable, key accepted, model
listed) before anything heavy loads. ``chat_batch`` runs up to ``concurrency`` calls at a time.

Structured calls (a ``schema``): ``llm.response_format=auto`` (default) probes, on the first
structured call, what the server enforces — json_schema, json_object with a ``schema`` field
(llama-cpp-python), vLLM's ``guided_json``, JSON mode or only free text — and uses the strongest it
honours, saying which in one line; any other value is used without a probe (:mod:`.structured_modes`).
Replies under the first three are marked ``constrained``. A reply with ``finish_reason: "length"``
is marked ``truncated``. A call's ``stop`` strings are sent as ``stop`` and applied to the reply once
more by ctxbench's rule (:mod:`.stop`: a server that ignores ``stop`` still returns the cut reply,
marked ``stopped``); a server stops at a stop string even before any text, so a reply that comes back
empty under ``stop`` is asked once more without it and cut here (both calls' tokens are counted).
A prompt over ``context_window -
max_tokens`` keeps its system message and loses the middle of its longest message (:mod:`.fit`).

A conversation that ends with an assistant message (an answer prompt's reply prefix, ``qa_prompt=ruler``)
is sent as it is, for the server to continue that message. llama.cpp's server continues a final assistant
message (it renders it as a prefill); vLLM does when asked: ``llm.extra_body={continue_final_message: true,
add_generation_prompt: false}`` (for every call of the run: use it only where every answer has a prefix);
OpenAI's API answers in a new turn after it. Which a server did is not checked: compare a few replies.

Token counts come from the server's ``usage`` (its own tokenizer: ``token_source="server"``).
A count the server leaves out or reports as anything but an int in ``[0, 2**31)`` (a string, a
float, a bool, a negative or absurd number: warned once), ``count_tokens`` (the context tokens systems report) and prompt
fitting use one :class:`~ctxbench.llm.token_count.TokenCounter`: ``llm.tokenizer`` (an HF
tokenizer id/folder of the served model) if set, else tiktoken's encoding for a model name
tiktoken knows (``"tokenizer"``), else ``ceil(chars / 4)`` (``"estimate"``) — never another
model's tokenizer as a guess. The first estimate prints one warning naming the fix
(``llm.tokenizer=...``); :func:`~ctxbench.llm.token_count.token_counts_record` counts the calls
per source for results.json.
"""
from __future__ import annotations

import contextvars
import dataclasses
import email.utils
import json
import logging
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ctxbench.core.registry import register, suggest
from ctxbench.core.plain import json_kind as _kind
from ctxbench.core.secrets import check_env_name, scrub_text
from ctxbench.llm.base import ChatResult, LLMUnavailable, Message, UsageMeter
from ctxbench.llm.cache import maybe_cached, utf8
from ctxbench.llm.fit import fit_messages
from ctxbench.llm.stop import apply_stop, stop_list
from ctxbench.llm.refusal import EXHAUSTED, FATAL, REFUSED, CallFailed, is_refusal
from ctxbench.llm.structured_modes import (CONSTRAINING, PROBE_MESSAGES, PROBE_PHASE, PROBE_TOKENS, RESPONSE_FORMATS,
                                           StructuredMode, request_fields)
from ctxbench.llm.token_count import ESTIMATE, FIX, SERVER, TokenCounter

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
AUTH_STATUS = {401: "Unauthorized", 403: "Forbidden"}
DETAIL_BYTES = 1 << 16  # of an error reply's body
MODELS_BYTES = 1 << 22  # of a /models reply
REPLY_BYTES = 32 << 20  # of a chat reply: a larger one fails the call (a broken or hostile server)
TOKEN_COUNT_LIMIT = 1 << 31  # a reported token count at or above this is not believed
MODEL_NAME_CHARS = 200  # of a reply's ``model``: a longer one is cut
PLAIN_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")  # ASCII digits only: not "1e3", "inf", "-5", "١٢"


class _Retryable(Exception):
    def __init__(self, msg: str, retry_after: float | None = None):
        super().__init__(msg)
        self.retry_after = retry_after


class _Unreachable(_Retryable):
    """No connection could be made: fatal until the server has answered once, then retried."""


class _Fatal(Exception):
    """This call fails without retries; the backend stays usable."""


class _Refused(_Fatal):
    """The server named the request invalid (:func:`~.refusal.is_refusal`): a retry would be refused too."""

    def __init__(self, msg: str, status: int, body: str):
        super().__init__(msg)
        self.status, self.body = status, body


def unreachable_reason(err: BaseException) -> str:
    """Why an ``httpx.ConnectError`` made no connection (refused, host not found, ...), from its causes."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"host not found: {cause.strerror or cause}"
        if isinstance(cause, OSError):
            return str(cause.strerror or cause)
        cause = cause.__cause__ or cause.__context__
    return str(err) or type(err).__name__


class _TooSlow(Exception):
    """The reply body did not arrive within its deadline (a server trickling bytes)."""


def read_capped(resp: Any, limit: int, deadline: float | None = None) -> bytes:
    """At most ``limit`` bytes of a streamed httpx reply's body; :class:`_TooSlow` past ``deadline``
    (a ``time.monotonic()`` value: each read has the client's timeout, this bounds them all)."""
    out = bytearray()
    for chunk in resp.iter_bytes():
        out += chunk
        if len(out) >= limit:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise _TooSlow
    return bytes(out[:limit])


def plain_number(value: Any) -> float | None:
    """A header's value as a number if it is plain ASCII digits (``"12"``, ``" 1.5 "``), else None:
    ``str.isdigit`` and ``float`` also take other scripts' digits, superscripts, ``inf``, ``1e3``."""
    text = value.strip() if isinstance(value, str) else ""
    return float(text) if PLAIN_NUMBER.fullmatch(text) else None


def retry_after_s(value: Any) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: plain seconds, or an HTTP date; None for anything else."""
    seconds = plain_number(value)
    if seconds is not None or not isinstance(value, str):
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def read_reply(resp: Any, deadline: float, timeout_s: float) -> bytes:
    """The whole body of a 2xx chat reply: over :data:`REPLY_BYTES` fails the call, too slow is retried."""
    declared = resp.headers.get("Content-Length", "")
    size = plain_number(declared)
    if size is not None and size > REPLY_BYTES:
        raise _Fatal(f"reply too large (Content-Length {declared} bytes, over the {REPLY_BYTES >> 20} MiB limit)")
    try:
        raw = read_capped(resp, REPLY_BYTES + 1, deadline)
    except _TooSlow:
        raise _Retryable(f"timeout: the reply was not complete within {timeout_s:g} s "
                         "(the server sends it too slowly)") from None
    if len(raw) > REPLY_BYTES:
        raise _Fatal(f"reply too large (over the {REPLY_BYTES >> 20} MiB limit)")
    return raw


def model_ids(raw: bytes) -> list[str]:
    """The model ids of a ``/models`` reply (``{"data": [{"id": ...}]}``); [] if it is not one."""
    try:
        data = json.loads(raw)
        return [str(m["id"]) for m in data["data"] if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError, RecursionError):
        return []


def short_usage(usage: dict[str, Any]) -> str:
    """The reported token counts, on one short line."""
    text = json.dumps({k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _count(v: Any) -> bool:
    """A token count a server may report: an int in ``[0, TOKEN_COUNT_LIMIT)`` (not a bool, a string, a
    float, a negative or an absurd number, which no cache row could hold)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < TOKEN_COUNT_LIMIT


def same_model(served: str, requested: str) -> bool:
    """``served`` is ``requested``, its ``:latest`` tag or a dated snapshot of it (``gpt-4o-mini-2024-07-18``)."""
    return served in (requested, requested + ":latest") or served.startswith(requested + "-")



def reply_problem(data: Any) -> str | None:
    """Why a parsed chat reply holds no first choice (None when it does)."""
    if not isinstance(data, dict):
        return f"a JSON {_kind(data)}, not an object"
    choices = data.get("choices")
    if choices is None:
        return "no 'choices' in it"
    if not isinstance(choices, list):
        return f"'choices' is a {_kind(choices)}, not a list"
    if not choices:
        return "'choices' is empty"
    if not isinstance(choices[0], dict):
        return f"choices[0] is a {_kind(choices[0])}, not an object"
    return None


def did_you_mean(name: str, choices: list[str], show: int = 10) -> str:
    """`` Did you mean 'x'? Served: a, b.`` over the server's model ids (:func:`ctxbench.core.registry.suggest`)."""
    return suggest(name, choices, cutoff=0.4, label="Served", show=show)


class OpenAIChatLLM:
    def __init__(self, cfg: Any):
        from ctxbench.models.loading import ModelLoadError

        self.name = cfg.name
        self.model_name = str(cfg.model or "")
        if not self.model_name:
            raise ModelLoadError("llm.model is required for llm=openai (e.g. llm.model=gpt-4o-mini)")
        self.base_url = str(cfg.base_url).rstrip("/")
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ModelLoadError(f"llm.base_url={scrub_text(self.base_url)!r} is not an http(s) URL "
                                 "(e.g. http://127.0.0.1:8080/v1)")
        self.extra_body = dict(cfg.extra_body or {})
        self._api_key, self._key_env = self._read_key(cfg.api_key_env, ModelLoadError)
        self.timeout_s = float(cfg.timeout_s)
        self.max_retries = cfg.max_retries
        self.backoff_s = float(cfg.backoff_s)
        self.backoff_max_s = float(cfg.backoff_max_s)
        self.max_consecutive_failures = cfg.max_consecutive_failures
        self.concurrency = cfg.concurrency
        self.response_format = cfg.response_format
        if self.response_format not in RESPONSE_FORMATS:
            raise ModelLoadError(f"llm.response_format={self.response_format!r}: expected one of "
                                 f"{', '.join(RESPONSE_FORMATS)}")
        self.structured = StructuredMode(self.response_format, self.name)
        self.retries_saved = 0  # retries not sent after a 5xx that named the request invalid
        self.check_model_listed = cfg.check_model_listed
        self.preflight_timeout_s = float(cfg.preflight_timeout_s)
        self.cache_id = self._cache_id()
        self._window = cfg.context_window
        self._counter = TokenCounter(cfg.tokenizer, self.model_name)
        self.meter = UsageMeter()
        self.truncated_calls = 0  # prompts cut to fit context_window
        self._lock = threading.Lock()
        self._reached = False  # a call has succeeded: a lost connection is now worth retrying
        self._failures_in_a_row = 0
        self._warned: set[str] = set()  # warnings already printed (once per backend)
        self._http: Any = None  # the httpx.Client, made on first use

    def _client(self) -> Any:
        """The one ``httpx.Client`` of this backend (imported late: it is not needed to list or build)."""
        with self._lock:
            if self._http is None:
                import httpx

                logging.getLogger("httpx").setLevel(logging.WARNING)  # not one INFO line per request
                self._http = httpx.Client(timeout=self.timeout_s, follow_redirects=False)
            return self._http

    def _cache_id(self) -> str:
        """model@base_url, plus extra_body: what changes every request (:meth:`call_cache_id` adds the rest)."""
        cid = f"{self.model_name}@{self.base_url}"
        if self.extra_body:
            cid += " " + json.dumps(self.extra_body, sort_keys=True, default=str)
        return cid

    def call_cache_id(self, structured: bool) -> str:
        """The call cache's model id of one call: a structured call's names the mechanism it is sent with
        (probing first under ``auto``), so replies asked one way are never served for another."""
        mech = self._mechanism() if structured else "json_schema"
        return self.cache_id + ("" if mech == "json_schema" else f" response_format={mech}")

    def _mechanism(self) -> str:
        """How structured calls are sent: ``llm.response_format``, or what the probe found."""
        return self.structured.resolve(self._probe_send)

    def _probe_send(self, fields: dict[str, Any]) -> ChatResult:
        """One probe request (counted under the ``probe`` phase, never in the failures in a row); a
        request still failing after its retries stops the run: the server cannot answer yet."""
        body = {"model": self.model_name, "messages": PROBE_MESSAGES, "max_tokens": PROBE_TOKENS,
                "temperature": 0.0, **self.extra_body, **fields}
        try:
            r = self._send(body, PROBE_MESSAGES)
        except CallFailed as e:
            self.meter.add(PROBE_PHASE, ChatResult(text="", prompt_tokens=0, completion_tokens=0, failed=True,
                                                   error=self.scrub(str(e))))
            if e.kind == EXHAUSTED:
                raise LLMUnavailable(self.scrub(
                    f"llm={self.name}: the structured-output probe got no answer ({e}) — is the server "
                    "overloaded? llm.response_format=json_schema|json_object_schema|guided_json|json_object|none "
                    "skips the probe")) from None
            raise
        self.meter.add(PROBE_PHASE, r)
        return r

    def results_record(self) -> dict[str, Any]:
        """What results.json ``llm`` adds for this backend: the structured-output mechanism (None before any
        structured call) and the retries saved."""
        return {"structured_mode": self.structured.record() if self.structured.used else None,
                "retries_saved": self.retries_saved}

    @staticmethod
    def _read_key(env: Any, error: type[Exception]) -> tuple[str | None, str | None]:
        if not env:
            return None, None
        env = check_env_name("llm.api_key_env", env, error)
        key = os.environ.get(env)
        if not key:
            raise error(f"llm.api_key_env={env}: the environment variable {env} is not set "
                        "(export it, or set llm.api_key_env=null for a server without keys)")
        return key, env

    @property
    def context_window(self) -> int:
        return self._window

    def known_secrets(self) -> list[str]:
        """What this backend sends that must be written nowhere: the key (whatever variable holds it) and
        the password of ``base_url`` (httpx sends it as Basic auth)."""
        return [s for s in (self._api_key, urllib.parse.urlsplit(self.base_url).password) if s]

    def scrub(self, text: str) -> str:
        """``text`` without the key, other secrets' values or key-shaped strings, on one line."""
        return " ".join(self.scrub_reply(str(text)).split())

    def scrub_reply(self, text: str) -> str:
        """A reply's ``text`` without :meth:`known_secrets`, secret variables' values or key-shaped strings."""
        return scrub_text(text, extra=self.known_secrets())

    # ---- token counting -------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as :meth:`token_count_source` says (the estimate warns once)."""
        if self._counter.source == ESTIMATE:
            self._warn_estimate()
        return self._counter.count(text)

    def token_count_source(self) -> str:
        """``"tokenizer"`` or ``"estimate"``: how :meth:`count_tokens` (and a count missing from a
        reply's ``usage``) is made."""
        return self._counter.source

    def tokenizer_label(self) -> str | None:
        """The tokenizer that counts (``llm.tokenizer`` or ``tiktoken:<encoding>``); None for estimates."""
        return self._counter.label

    def _warn_estimate(self) -> None:
        if "estimate" in self._warned:  # printed already (count_tokens runs for every message)
            return
        self._warn_once("estimate", f"no tokenizer for model {self.model_name!r} (llm.tokenizer is null and "
                                    f"{self._counter.why_estimate}): token counts made here are estimates, "
                                    "ceil(chars/4) — prompt fitting to llm.context_window, count_tokens (the "
                                    "context tokens systems report) and every call whose reply has no `usage` "
                                    "(results.json llm.token_counts.calls_by_source.estimate counts them); "
                                    f"{FIX}")

    # ---- preflight ------------------------------------------------------------------------
    def preflight(self) -> None:
        """``GET {base_url}/models``: unreachable, key refused, or model not listed → LLMUnavailable.

        A 404 (servers without the endpoint) or any other answer passes: the calls will tell. A
        ``llm.tokenizer`` that cannot load fails here too (ModelLoadError naming the key).
        """
        import httpx

        self._counter.source  # loads llm.tokenizer (or finds tiktoken's encoding) now, not mid-run

        url = self.base_url + "/models"
        deadline = time.monotonic() + self.preflight_timeout_s
        try:
            with self._client().stream("GET", url, headers=self._headers(), timeout=self.preflight_timeout_s) as resp:
                status = resp.status_code
                raw = read_capped(resp, DETAIL_BYTES if status in AUTH_STATUS else MODELS_BYTES, deadline)
        except httpx.TimeoutException:
            raise self._no_reply(url) from None
        except httpx.ConnectError as e:
            raise LLMUnavailable(self._unreachable_msg(url, unreachable_reason(e))) from None
        except (httpx.RequestError, _TooSlow):  # dropped, cut, undecodable or trickled: the calls will tell
            return
        if status in AUTH_STATUS:
            raise self._auth_error(status, url, self._detail(raw))
        if not 200 <= status < 300:
            self._cannot_check(f"GET {url} answered HTTP {status}")
            return
        ids = model_ids(raw)
        if not ids:
            self._cannot_check(f"GET {url} listed no models" if raw.strip().startswith(b"{")
                               else f"GET {url} answered with a body that is not a model list")
        if ids and self.check_model_listed and not {self.model_name, self.model_name + ":latest"} & set(ids):
            raise LLMUnavailable(self.scrub(
                f"llm={self.name}: model {self.model_name!r} is not served by {self.base_url}."
                f"{did_you_mean(self.model_name, ids)} Check llm.model "
                "(or llm.check_model_listed=false for a server that answers for any name)"))

    def _cannot_check(self, what: str) -> None:
        """Preflight could not verify the model: say so once and go on (the calls will tell)."""
        if self.check_model_listed:
            self._warn_once("models", f"{what}; cannot check that llm.model={self.model_name!r} is served "
                                      "(llm.check_model_listed=false skips the check)")

    def _warn_once(self, key: str, msg: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        print(f"warning: llm={self.name}: {self.scrub(msg)}", file=sys.stderr)

    def _no_reply(self, url: str) -> LLMUnavailable:
        return LLMUnavailable(self.scrub(
            f"llm={self.name}: no reply from {url} within {self.preflight_timeout_s:g} s — is the server "
            "running? check llm.base_url (or raise llm.preflight_timeout_s)"))

    # ---- calls ----------------------------------------------------------------------------
    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False,
             schema: dict[str, Any] | None = None, seed: int | None = None,
             stop: list[str] | None = None) -> ChatResult:
        messages = self._fit(messages, max_new_tokens)
        mech = self._mechanism() if schema is not None or json_mode else "none"
        body = self._body(messages, max_new_tokens, temperature, json_mode, schema, mech)
        if seed is not None:  # OpenAI's (and vLLM's, llama.cpp's) sampling seed
            body["seed"] = int(seed)
        stops = stop_list(stop)
        if stops:
            body["stop"] = stops
        try:
            r = self._send(body, messages)
            if stops:
                r = self._stopped(r, body, messages, stops)
        except CallFailed as e:
            return self._failed(phase, str(e))
        r.constrained = schema is not None and mech in CONSTRAINING
        self.meter.add(phase, r)
        return r

    def _send(self, body: dict[str, Any], messages: list[Message]) -> ChatResult:
        """One request under the retry policy (module doc); :class:`~.refusal.CallFailed` when it fails."""
        error = ""
        for attempt in range(self.max_retries + 1):
            try:
                r = self._post(body, messages)
            except _Retryable as e:
                if isinstance(e, _Unreachable) and not self._reached:
                    raise LLMUnavailable(str(e)) from None
                error = str(e)
                if attempt == self.max_retries:
                    break
                time.sleep(self._delay(attempt, e.retry_after))
            except _Refused as e:
                if e.status in RETRY_STATUS:  # a transient status the old policy would have retried
                    with self._lock:
                        self.retries_saved += self.max_retries - attempt
                raise CallFailed(str(e), REFUSED, e.status, e.body) from None
            except _Fatal as e:
                raise CallFailed(str(e), FATAL) from None
            else:
                with self._lock:
                    self._reached, self._failures_in_a_row = True, 0
                return r
        raise CallFailed(error, EXHAUSTED)

    def _stopped(self, r: ChatResult, body: dict[str, Any], messages: list[Message], stops: list[str]) -> ChatResult:
        """``r`` under ctxbench's stop rule (:mod:`.stop`); an empty reply (the server stopped at a
        leading stop string) asked once more without ``stop``, cut here, both calls' tokens counted."""
        if not r.text.strip() and not r.truncated:
            again = self._send({k: v for k, v in body.items() if k != "stop"}, messages)
            again.prompt_tokens += r.prompt_tokens
            again.completion_tokens += r.completion_tokens
            r = again
        text, cut = apply_stop(r.text, stops)
        if cut:
            r = dataclasses.replace(r, text=text.strip(), stopped=True, truncated=False)
        return r

    def _measure(self, msgs: list[Message]) -> int:
        return sum(self.count_tokens(m.get("content", "")) + 4 for m in msgs)

    def fitted(self, messages: list[Message], max_new_tokens: int) -> list[Message]:
        """Messages within ``context_window - max_new_tokens`` as :meth:`count_tokens` counts them
        (system message kept, the middle of the longest message cut: :mod:`.fit`)."""
        return fit_messages(messages, max(1, self._window - max_new_tokens), self._measure, self.count_tokens)[0]

    def _fit(self, messages: list[Message], max_new_tokens: int) -> list[Message]:
        """:meth:`fitted`, counting a cut call in ``truncated_calls``."""
        fitted, cut = fit_messages(messages, max(1, self._window - max_new_tokens), self._measure, self.count_tokens)
        if cut:
            with self._lock:
                self.truncated_calls += 1
        return fitted

    def _body(self, messages: list[Message], max_new_tokens: int, temperature: float, json_mode: bool,
              schema: dict[str, Any] | None, mechanism: str) -> dict[str, Any]:
        """The request; its structure fields are ``mechanism``'s (:func:`~.structured_modes.request_fields`)."""
        return {"model": self.model_name, "messages": messages, "max_tokens": int(max_new_tokens),
                "temperature": float(temperature), **self.extra_body,
                **request_fields(mechanism, schema, json_mode)}

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max_s, self.backoff_s * (2 ** attempt))
        delay = delay * (0.5 + random.random() / 2)
        if retry_after is not None:
            delay = min(self.backoff_max_s, max(delay, retry_after))
        return delay

    def _failed(self, phase: str, error: str) -> ChatResult:
        """A counted failure; too many in a row means the backend is unusable."""
        error = self.scrub(error)
        r = ChatResult(text="", prompt_tokens=0, completion_tokens=0, failed=True, error=error)
        self.meter.add(phase, r)
        with self._lock:
            self._failures_in_a_row += 1
            n = self._failures_in_a_row
        if 0 < self.max_consecutive_failures <= n:
            raise LLMUnavailable(f"llm={self.name}: {n} calls in a row failed "
                                 f"(llm.max_consecutive_failures={self.max_consecutive_failures}); "
                                 f"last error: {error}")
        return r

    def chat_batch(self, batch: list[list[Message]], *, max_new_tokens: int = 64, temperature: float = 0.0,
                   phase: str = "answer", json_mode: bool = False,
                   schema: dict[str, Any] | None = None, seed: int | None = None,
                   stop: list[str] | None = None) -> list[ChatResult]:
        kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, phase=phase, json_mode=json_mode,
                  schema=schema, seed=seed, stop=stop)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            # each call in a copy of the caller's context: it is counted in the calling task's scopes (llm.scope)
            futures = [pool.submit(contextvars.copy_context().run, self.chat, m, **kw) for m in batch]
            try:
                return [f.result() for f in futures]
            except BaseException:  # LLMUnavailable: do not send the calls still queued
                for f in futures:
                    f.cancel()
                raise

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _detail(self, raw: bytes) -> str:
        """An error reply's body, scrubbed *before* it is cut (a cut key would escape the scrub)."""
        return self.scrub(raw.decode("utf-8", "replace"))[:300]

    def _unreachable_msg(self, url: str, reason: str) -> str:
        return self.scrub(f"llm={self.name}: cannot reach {url} ({reason}) — is the server running? "
                          "check llm.base_url")

    def _auth_error(self, code: int, url: str, detail: str) -> LLMUnavailable:
        fix = (f"check the key in ${self._key_env}" if self._key_env else
               "the server wants a key: set llm.api_key_env to the NAME of the variable that holds it")
        return LLMUnavailable(self.scrub(f"llm={self.name}: HTTP {code} {AUTH_STATUS[code]} from {url} — {fix}"
                                         + (f" (server said: {detail})" if detail else "")))

    def _http_error(self, code: int, headers: Any, raw: bytes, url: str) -> Exception:
        """The exception for a reply that is not 2xx: fatal for the backend, retried, or failing this call."""
        detail = self._detail(raw)
        if code in AUTH_STATUS:
            return self._auth_error(code, url, detail)
        if code == 404:
            return LLMUnavailable(self.scrub(
                f"llm={self.name}: HTTP 404 from {url}: model {self.model_name!r} not found (or a wrong path) — "
                "check llm.model and llm.base_url" + (f" (server said: {detail})" if detail else "")))
        if is_refusal(code, detail):  # the request itself is invalid: the same request is refused again
            return _Refused(f"HTTP {code}: {detail}", code, detail)
        if code in RETRY_STATUS:
            return _Retryable(f"HTTP {code}: {detail}", retry_after_s(headers.get("Retry-After")))
        if 300 <= code < 400:
            where = headers.get("Location")
            return _Fatal(self.scrub(f"HTTP {code} redirect" + (f" to {where[:200]}" if where else "")
                                     + " (redirects are not followed: set llm.base_url to the final address)"))
        return _Fatal(f"HTTP {code}: {detail}")

    def _post(self, body: dict[str, Any], messages: list[Message]) -> ChatResult:
        import httpx

        url = self.base_url + "/chat/completions"
        deadline = time.monotonic() + self.timeout_s
        try:
            with self._client().stream("POST", url, content=json.dumps(body).encode(),
                                       headers=self._headers()) as resp:
                ok = 200 <= resp.status_code < 300
                raw = read_reply(resp, deadline, self.timeout_s) if ok else read_capped(resp, DETAIL_BYTES, deadline)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timeout after {self.timeout_s}s ({type(e).__name__}: {e})") from None
        except httpx.ConnectError as e:
            raise _Unreachable(self._unreachable_msg(url, unreachable_reason(e))) from None
        except httpx.TransportError as e:  # reset, dropped, or cut mid-reply (RemoteProtocolError)
            raise _Retryable(self.scrub(f"connection error: {type(e).__name__}: {e}")) from None
        except httpx.RequestError as e:  # a body that does not decode (Content-Encoding), ...
            raise _Retryable(self.scrub(f"unreadable reply: {type(e).__name__}: {e}")) from None
        except _TooSlow:
            raise _Retryable(f"timeout: the error reply was not complete within {self.timeout_s:g} s") from None
        if not ok:
            raise self._http_error(resp.status_code, resp.headers, raw, url)
        data = self._parse(raw, resp.headers.get("Content-Type", ""))
        text = self._content(data)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        pt = usage.get("prompt_tokens")
        ct = usage.get("completion_tokens")
        if (pt is not None and not _count(pt)) or (ct is not None and not _count(ct)):
            self._warn_once("usage", f"the server reported usage {short_usage(usage)}, not token counts; "
                                     "counting them here instead (ChatResult.token_source says how)")
        source = SERVER if _count(pt) and _count(ct) else self.token_count_source()
        if not _count(pt):
            pt = sum(self.count_tokens(m.get("content", "")) for m in messages)
        if not _count(ct):
            ct = self.count_tokens(text)
        truncated = data["choices"][0].get("finish_reason") == "length"
        reason = data["choices"][0].get("stop_reason")  # vLLM names the stop string that ended the reply
        stopped = isinstance(reason, str) and reason in (body.get("stop") or [])
        return ChatResult(text=self.scrub_reply(text.strip()), prompt_tokens=pt, completion_tokens=ct,
                          truncated=truncated, stopped=stopped, token_source=source,
                          served_model=self._served(data.get("model")))

    def _served(self, model: Any) -> str:
        """The reply's ``model`` (scrubbed, cut to :data:`MODEL_NAME_CHARS`; "" when it is not a usable
        string); one warning when it is not the requested model."""
        if not isinstance(model, str) or not model.strip() or not utf8(model):
            return ""
        served = self.scrub(model)[:MODEL_NAME_CHARS]
        if not same_model(served, self.model_name):
            self._warn_once("served", f"asked for model {self.model_name!r}, the server answered with {served!r} "
                                      "(results.json llm.served_models counts the calls per served model); "
                                      "check llm.model and llm.base_url")
        return served

    def _parse(self, raw: bytes, content_type: str = "") -> dict[str, Any]:
        """The reply as a dict holding a first choice; anything else is a malformed (retried) reply."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            what = ("empty" if not raw.strip() else "not JSON" if isinstance(e, ValueError)
                    else "JSON nested too deeply")
            if content_type and "json" not in content_type.lower():
                what += f", Content-Type: {content_type[:60]}"
            raise _Retryable(self.scrub(f"malformed reply ({what}): {raw[:200]!r}")) from None
        problem = reply_problem(data)
        if problem is not None:
            raise _Retryable(self.scrub(f"malformed reply ({problem}): {raw[:200]!r}"))
        return data

    def _content(self, data: dict[str, Any]) -> str:
        """The reply text; no content at all (``content: null``, no message) fails the call."""
        choice = data["choices"][0]
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if text is None:
            what = "content: null" if isinstance(message, dict) else "content: null (no message)"
            raise _Fatal(f"{what} in the reply (finish_reason={choice.get('finish_reason')!r})")
        if not isinstance(text, str):
            raise _Retryable(self.scrub(f"malformed reply (content is a {_kind(text)}, not a string): "
                                        f"{str(text)[:200]!r}"))
        if not utf8(text):  # a lone surrogate (JSON "\ud800"): no file, cache or terminal could hold it
            raise _Retryable(self.scrub(f"malformed reply (content is not valid Unicode: "
                                        f"{text[:200].encode('utf-8', 'backslashreplace').decode()!r})"))
        return text


@register("llm", "openai", aliases=("openai_compat",))
def build_openai(cfg: Any) -> Any:
    return maybe_cached(OpenAIChatLLM(cfg), cfg)
