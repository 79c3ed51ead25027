"""The OpenAI wire format of the lent backend: requests read into backend calls, replies written back.

:func:`chat_request` reads a ``/v1/chat/completions`` body into the keywords of
:meth:`ctxbench.llm.shared.SharedLLM.chat` (``max_tokens`` / ``max_completion_tokens`` →
``max_new_tokens``, ``temperature``, ``seed``, ``stop``, and ``response_format``: ``json_object`` →
``json_mode``, ``json_schema`` → ``json_mode`` + its ``schema``, which the backend enforces as it does a
built-in's structured call: ``llm=hf`` by grammar-constrained decoding, ``llm=openai`` as the server
allows). A request naming no ``max_tokens`` gets :data:`DEFAULT_MAX_TOKENS` (at most half the window), one
naming no ``temperature`` is greedy (ctxbench's default, not OpenAI's 1.0). What the backend cannot do
(``n`` > 1, ``stream``, tools, logprobs, images) is refused with a 400 naming the field, never ignored;
fields that change nothing here (``user``, ``top_p``, ``metadata`` ...) are ignored.

:func:`completion` writes a reply with ``usage`` as ctxbench counted the call (the tokens the run's cost
accounting recorded) and a ``ctxbench`` object (``cached``, ``constrained``, ``token_source``, ``phase``);
``finish_reason`` is ``length`` for a reply cut at its token limit. Errors are OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}`` (:class:`ApiError`).
"""
from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_MAX_TOKENS = 1024  # a chat request naming no max_tokens: this, at most half the context window
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
REFUSED = {  # fields whose meaning the backend cannot honour: refused when set to anything but their no-op
    "stream": "streamed replies are not served (send stream=false)",
    "tools": "tool calls are not served",
    "functions": "function calls are not served",
    "logprobs": "logprobs are not served",
    "top_logprobs": "logprobs are not served",
    "audio": "audio is not served",
    "prediction": "predicted outputs are not served",
}


@dataclass
class ApiError(Exception):
    """An error reply: HTTP ``status`` and OpenAI's error object. ``retry``: whether an OpenAI client
    should try again (``x-should-retry``; a backend call that failed was already retried by ctxbench)."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"
    retry: bool | None = None

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str, why: str) -> ApiError:
    """A 400 naming the request field ``param``."""
    return ApiError(400, f"{param}: {why}", param=param, code="invalid_value")


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]
    params: dict[str, Any] = field(default_factory=dict)  # SharedLLM.chat keywords but phase


def check_model(body: dict[str, Any], served: list[str]) -> str:
    """The request's ``model``, which must be one this server serves (404 ``model_not_found`` else)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "required: the model name the lent backend was handed (LentBackend.model)")
    if model not in served:
        raise ApiError(404, f"model {model!r} is not served here; this run lends {', '.join(map(repr, served))}",
                       param="model", code="model_not_found")
    return model


def chat_request(body: dict[str, Any], context_window: int) -> ChatRequest:
    """``body`` as a backend call (see the module doc); :class:`ApiError` 400 naming the bad field."""
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False, [], {}):
            raise bad(name, why)
    if body.get("tool_choice") not in (None, "none"):
        raise bad("tool_choice", "tool calls are not served")
    if body.get("n") not in (None, 1):
        raise bad("n", "one choice per request is served (n=1)")
    params: dict[str, Any] = {"max_new_tokens": _max_tokens(body, context_window),
                              "temperature": _number(body, "temperature", 0.0, 0.0, 2.0)}
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise bad("seed", "expected an integer")
        params["seed"] = seed
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise bad("stop", "expected a string or a list of non-empty strings")
        if stop:
            params["stop"] = stop
    params.update(_response_format(body.get("response_format")))
    return ChatRequest(_messages(body.get("messages")), params)


def _max_tokens(body: dict[str, Any], context_window: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(name, "expected an integer >= 1")
            if v >= context_window:
                raise bad(name, f"{v} leaves no room for the prompt in the model's {context_window}-token window")
            return v
    return max(1, min(DEFAULT_MAX_TOKENS, context_window // 2))


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise bad(name, f"expected a number in [{lo:g}, {hi:g}]")
    return float(v)


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise bad("messages", "expected a non-empty list of {role, content}")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "expected an object {role, content}")
        role = ROLES.get(m.get("role"))  # type: ignore[arg-type]
        if role is None:
            raise bad(f"{where}.role", f"{m.get('role')!r} is not served (system, developer, user or assistant)")
        if m.get("tool_calls") or m.get("function_call"):
            raise bad(f"{where}.tool_calls", "tool calls are not served")
        out.append({"role": role, "content": _content(m.get("content"), f"{where}.content")})
    return out


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text only
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{j}]", "only text parts ({type: text, text}) are served")
            texts.append(part["text"])
        return "".join(texts)
    raise bad(where, "expected a string or a list of text parts")


def _response_format(fmt: Any) -> dict[str, Any]:
    if fmt is None:
        return {}
    if not isinstance(fmt, dict):
        raise bad("response_format", "expected an object {type: text | json_object | json_schema}")
    kind = fmt.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"json_mode": True}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad("response_format.json_schema.schema", "expected a JSON Schema object")
        return {"json_mode": True, "schema": schema}
    raise bad("response_format.type", f"{kind!r} is not one of text, json_object, json_schema")


def completion(r: Any, model: str, phase: str) -> dict[str, Any]:
    """The ``chat.completion`` of the backend's reply ``r`` (a :class:`~ctxbench.llm.base.ChatResult`)."""
    usage = {"prompt_tokens": int(r.prompt_tokens), "completion_tokens": int(r.completion_tokens),
             "total_tokens": int(r.prompt_tokens) + int(r.completion_tokens)}
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text},
                         "finish_reason": "length" if r.truncated else "stop", "logprobs": None}],
            "usage": usage,
            "ctxbench": {"phase": phase, "cached": bool(r.cached), "constrained": bool(r.constrained),
                         "token_source": r.token_source or "unknown"}}


def embedding_inputs(body: dict[str, Any], dim: int | None) -> tuple[list[str], str]:
    """(the texts of an ``/v1/embeddings`` body, its ``encoding_format``); :class:`ApiError` 400 else."""
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        raise bad("input", "expected a string or a non-empty list of strings")
    if not all(isinstance(t, str) for t in texts):
        raise bad("input", "expected strings (token arrays are not served)")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", "expected float or base64")
    dims = body.get("dimensions")
    if dims is not None and dims != dim:
        raise bad("dimensions", f"the embedder gives {dim} dimensions (leave it out)")
    return texts, fmt


def embeddings(vectors: np.ndarray, model: str, fmt: str) -> dict[str, Any]:
    """The ``list`` of embeddings of ``vectors`` (rows, float32), floats or base64 of little-endian float32."""
    rows = np.asarray(vectors, dtype="<f4")
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(row.tobytes()).decode("ascii") if fmt == "base64" else row.tolist()}
            for i, row in enumerate(rows)]
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def models(names: list[str]) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "ctxbench"}
                                       for n in names]}
