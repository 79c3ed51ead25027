"""Structured LLM output: pull JSON out of a reply, validate it against a small schema, retry once
with the error, and count what failed — never crash, never lose a failure silently.

Schemas are plain Python values: ``str``/``int``/``bool``/``float`` (types), ``[T]`` (list of T),
``{"key": T, "opt?": T}`` (object; ``?`` marks an optional key), ``("A", "B")`` (one of these
strings, case-insensitive). Placeholder strings such as ``<fact>`` copied from a prompt's format
line are rejected as invalid output (small models copy them).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable

from ctxbench.llm.base import ChatLLM, Message

_PLACEHOLDER = re.compile(r"^\s*<[^<>]{1,40}>\s*$")


class SchemaError(ValueError):
    pass


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (code fences and chatter around it allowed)."""
    dec = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                obj, _ = dec.raw_decode(text[i:])
                return obj
            except json.JSONDecodeError:
                continue
    raise SchemaError("no JSON object or array in the reply")


def validate(obj: Any, schema: Any, where: str = "$") -> Any:
    """Check ``obj`` against ``schema``; returns the (normalised) value or raises SchemaError."""
    if isinstance(schema, tuple):  # enum of strings
        if not isinstance(obj, str) or obj.strip().upper() not in {s.upper() for s in schema}:
            raise SchemaError(f"{where}: expected one of {list(schema)}, got {obj!r}")
        return obj.strip().upper()
    if isinstance(schema, list):
        if not isinstance(obj, list):
            raise SchemaError(f"{where}: expected a list, got {type(obj).__name__}")
        return [validate(x, schema[0], f"{where}[{i}]") for i, x in enumerate(obj)]
    if isinstance(schema, dict):
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object, got {type(obj).__name__}")
        out = {}
        for key, sub in schema.items():
            name, optional = (key[:-1], True) if key.endswith("?") else (key, False)
            if name not in obj or obj[name] is None:
                if optional:
                    continue
                raise SchemaError(f"{where}: missing key {name!r}")
            out[name] = validate(obj[name], sub, f"{where}.{name}")
        return out
    if schema is str:
        if isinstance(obj, (int, float)) and not isinstance(obj, bool):
            obj = str(obj)
        if not isinstance(obj, str):
            raise SchemaError(f"{where}: expected a string, got {type(obj).__name__}")
        if _PLACEHOLDER.match(obj):
            raise SchemaError(f"{where}: {obj!r} is the format placeholder, not content")
        return obj.strip()
    if schema is int:
        if isinstance(obj, str) and obj.strip().lstrip("-").isdigit():
            return int(obj.strip())
        if not isinstance(obj, int) or isinstance(obj, bool):
            raise SchemaError(f"{where}: expected an integer, got {obj!r}")
        return obj
    if schema is bool:
        if isinstance(obj, str) and obj.lower() in ("true", "false"):
            return obj.lower() == "true"
        if not isinstance(obj, bool):
            raise SchemaError(f"{where}: expected true/false, got {obj!r}")
        return obj
    if schema is float:
        if not isinstance(obj, (int, float)) or isinstance(obj, bool):
            raise SchemaError(f"{where}: expected a number, got {obj!r}")
        return float(obj)
    if schema is Any or schema is None:
        return obj
    raise TypeError(f"unsupported schema {schema!r}")


def parse(text: str, schema: Any) -> Any:
    """Extract and validate; a bare list where ``{"key": [..]}`` is expected is wrapped."""
    obj = extract_json(text)
    if isinstance(schema, dict) and isinstance(obj, list):
        req = [k for k in schema if not k.endswith("?")]
        if len(req) == 1 and isinstance(schema[req[0]], list):
            obj = {req[0]: obj}
    return validate(obj, schema)


class StructuredCaller:
    """Calls an LLM for JSON, retrying with the validation error; counts outcomes in ``counts``.

    ``counts`` keys: ``json_calls``, ``json_retries``, ``json_failures`` (gave up after retries),
    plus whatever the systems add (``invented_ids`` ...).
    """

    def __init__(self, llm: ChatLLM, retries: int = 1, counts: Counter | None = None) -> None:
        self.llm, self.retries = llm, int(retries)
        self.counts: Counter = counts if counts is not None else Counter()

    def __call__(self, messages: list[Message], schema: Any, *, phase: str = "construction",
                 max_new_tokens: int = 256, check: Callable[[Any], Any] | None = None) -> Any | None:
        msgs = list(messages)
        for attempt in range(self.retries + 1):
            self.counts["json_calls"] += 1
            if attempt:
                self.counts["json_retries"] += 1
            r = self.llm.chat(msgs, max_new_tokens=max_new_tokens, temperature=0.0, phase=phase,
                              json_mode=True)
            try:
                if r.failed:
                    raise SchemaError(f"backend failure: {r.error}")
                obj = parse(r.text, schema)
                return check(obj) if check else obj
            except SchemaError as e:
                msgs = list(messages) + [
                    {"role": "assistant", "content": r.text[:400]},
                    {"role": "user", "content": f"Invalid: {e}. Reply with the JSON only."}]
        self.counts["json_failures"] += 1
        return None
