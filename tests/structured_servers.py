"""Loopback OpenAI-compatible servers that handle structured output as real servers do (for tests).

A :class:`Behaviour` is the ``reply`` of :class:`ctxbench.bench.loopback_server.LoopbackServer`. It reads
which way a request asks for structure (:func:`shape`: ``json_schema``, ``json_object_schema`` — a
``json_object`` response_format with a ``schema`` — ``guided_json`` or ``json_object``) and, like the
server it stands for, decodes under the schema (the reply is :func:`minimal`, a valid instance), refuses
the request (an HTTP error with the real server's message), applies JSON mode only (a JSON object that
ignores the schema), or ignores the field (free text). Plain calls get the loopback server's default reply.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ctxbench.bench.loopback_server import HTTPError, default_reply

# llama-cpp-python 0.3.x's answer to a json_schema response_format (a pydantic validation error, as HTTP 500)
LLAMA_CPP_PYTHON_REFUSAL = ("1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should "
                            "be 'text' or 'json_object' [type=literal_error, input_value='json_schema', input_type=str]")
IGNORED_JSON = '{"answer": "ok"}'  # JSON mode's reply: an object, not the schema's


def minimal(schema: dict[str, Any]) -> Any:
    """The smallest value valid under ``schema`` (the builders of ctxbench.llm.schema: objects, arrays,
    strings, integers, enums, anyOf): what a server decoding under the schema could reply."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "anyOf" in schema:
        return minimal(schema["anyOf"][0])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: minimal(props[k]) for k in schema.get("required", [])}
    if kind == "array":
        return [minimal(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


def shape(body: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(how the request asks for structure, its schema): None for a plain call."""
    if isinstance(body.get("guided_json"), dict):
        return "guided_json", body["guided_json"]
    rf = body.get("response_format")
    if not isinstance(rf, dict):
        return None, None
    if rf.get("type") == "json_schema":
        return "json_schema", (rf.get("json_schema") or {}).get("schema")
    if rf.get("type") == "json_object":
        return ("json_object_schema", rf["schema"]) if isinstance(rf.get("schema"), dict) else ("json_object", None)
    return str(rf.get("type")), None


@dataclass
class Behaviour:
    """``enforces``: shapes decoded under their schema; ``refuses``: shape → (HTTP status, message);
    ``json_mode``: a ``json_object`` request (with or without a schema) gets :data:`IGNORED_JSON`;
    anything else structured gets ``text`` (the field ignored)."""

    enforces: frozenset[str] = frozenset()
    refuses: dict[str, tuple[int, str]] = field(default_factory=dict)
    json_mode: bool = False
    text: str = "Sure! Here is what you asked for."

    def __call__(self, body: dict[str, Any]) -> str:
        how, schema = shape(body)
        if how is None:
            return default_reply(body)
        if how in self.refuses:
            raise HTTPError(*self.refuses[how])
        if how in self.enforces and schema is not None:
            return json.dumps(minimal(schema))
        if self.json_mode and how in ("json_object", "json_object_schema"):
            return IGNORED_JSON
        return self.text


NOT_SUPPORTED = (400, "response_format is not supported by this server")
SERVERS = {  # name → (behaviour, the mechanism the probe must pick)
    "openai": (Behaviour(frozenset({"json_schema"}), {"guided_json": (400, "Unrecognized request argument "
                                                                           "supplied: guided_json")}, True),
               "json_schema"),
    "llama_cpp_python": (Behaviour(frozenset({"json_object_schema"}), {"json_schema": (500, LLAMA_CPP_PYTHON_REFUSAL)},
                                   True), "json_object_schema"),
    "vllm_old": (Behaviour(frozenset({"guided_json"}), {"json_schema": (400, "1 validation error: response_format.type "
                                                                             "Input should be 'text' or 'json_object'")},
                           True), "guided_json"),
    "json_mode_only": (Behaviour(refuses={"json_schema": NOT_SUPPORTED}, json_mode=True), "json_object"),
    "text_only": (Behaviour(refuses={k: NOT_SUPPORTED for k in ("json_schema", "json_object_schema", "json_object")}),
                  "none"),
    # accepts every way of asking and ignores the schema: wrong JSON everywhere, detected (JSON mode is all it gives)
    "ignores_schema": (Behaviour(json_mode=True, text=IGNORED_JSON), "json_object"),
}
