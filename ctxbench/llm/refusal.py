"""Which failed requests are worth a retry: a server's deterministic refusal is not.

A server that names the request itself as invalid answers the same to the same request, however
long the backoff: an HTTP 4xx other than :data:`TRANSIENT_4XX` (timeout, conflict, too early, rate
limit), or a 5xx whose body says so — llama-cpp-python's server answers a ``response_format`` it does
not know with HTTP 500 ``Input should be 'text' or 'json_object'`` (a pydantic validation error).
:func:`is_refusal` tells them apart from a transient 5xx (``internal error``, a restarting server),
which is retried as before. :class:`CallFailed` is how a request that failed reaches the caller:
its ``kind`` says whether it was refused, failed for good, or ran out of retries.
"""
from __future__ import annotations

import json
import re

TRANSIENT_4XX = frozenset({408, 409, 425, 429})  # request timeout, conflict, too early, rate limited
# what a 5xx body says when the request itself is invalid (lowercase; validation errors of FastAPI/pydantic
# servers, OpenAI-style "invalid_request_error", vLLM's and llama.cpp's messages)
REFUSAL_MARKERS = ("input should be", "validation error", "invalid", "unsupported", "not supported",
                   "unrecognized request argument", "extra inputs are not permitted", "must be one of")
REFUSED, FATAL, EXHAUSTED = "refused", "fatal", "exhausted"  # CallFailed.kind


class CallFailed(Exception):
    """A request that got no usable reply: ``kind`` is :data:`REFUSED` (the server named it invalid),
    :data:`FATAL` (failed at once for another reason) or :data:`EXHAUSTED` (still failing after every retry)."""

    def __init__(self, error: str, kind: str, status: int | None = None, body: str = ""):
        super().__init__(error)
        self.kind, self.status, self.body = kind, status, body  # the HTTP status and error body, when there was one


def is_refusal(status: int, body: str) -> bool:
    """An HTTP error a retry cannot change: a 4xx not in :data:`TRANSIENT_4XX`, or a 5xx whose body names
    the request as invalid (:data:`REFUSAL_MARKERS`)."""
    if 400 <= status < 500:
        return status not in TRANSIENT_4XX
    low = body.lower()
    return status >= 500 and any(m in low for m in REFUSAL_MARKERS)


def server_message(body: str, limit: int = 100) -> str:
    """The gist of an error body, for one line: its ``error.message`` (or ``message``/``detail``) when it is
    JSON, without pydantic's ``[type=...]`` tails; one over ``limit`` starts at its last refusal marker
    (``1 validation error for X response_format.type Input should be ...``: the complaint is the end)."""
    text = body
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            err = err.get("message") or err.get("detail") or err
        text = err if isinstance(err, str) else json.dumps(err)
    except ValueError:
        pass
    text = re.sub(r"\s*\[type=[^\]]*\]?", "", " ".join(text.split()))
    low = text.lower()
    at = max((low.rfind(m) for m in REFUSAL_MARKERS), default=-1)
    text = text[at:] if at > 0 and len(text) > limit else text
    return text if len(text) <= limit else text[:limit - 3] + "..."
