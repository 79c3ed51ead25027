"""JSON Schemas for structured replies: small builders, and parsing a reply against one.

Every structured call of a memory system declares its schema beside its prompt with these
builders, and the backend enforces it (``llm=hf``: grammar-constrained decoding, see
:mod:`.grammar`; ``llm=openai``: ``response_format`` json_schema). The builders always bound a
reply: strings have ``maxLength``, lists ``maxItems``, objects no extra keys, so a constrained
reply closes within its token budget. Ids a model may name are an ``enum`` of the ids it was
shown, so an invented id cannot be generated.

:func:`parse_reply` reads a reply strictly: the whole reply is the JSON value (code fences
allowed); only for an unconstrained backend is the first ``{``/``[`` outside the leading prose
tried, once, never later brackets (they may lie inside string literals of a cut reply). A reply
cut at the token limit is never parsed (the caller counts it as truncated).
"""
from __future__ import annotations

import json
import re
from typing import Any

from ctxbench.core.errors import CtxbenchError

Schema = dict[str, Any]


class SchemaError(CtxbenchError, ValueError):
    """A reply that is not valid JSON for its schema (counted by the caller, never raised to the user)."""


def text(max_chars: int, min_chars: int = 1) -> Schema:
    """A string of ``min_chars``..``max_chars`` characters."""
    return {"type": "string", "minLength": int(min_chars), "maxLength": int(max_chars)}


def integer(lo: int | None = None, hi: int | None = None) -> Schema:
    s: Schema = {"type": "integer"}
    if lo is not None:
        s["minimum"] = int(lo)
    if hi is not None:
        s["maximum"] = int(hi)
    return s


def enum(values: list[Any]) -> Schema:
    """One of ``values`` (strings or integers), e.g. the ids actually shown to the model."""
    values = list(dict.fromkeys(values))
    if not values:
        raise ValueError("an enum needs at least one value")
    kind = "integer" if all(isinstance(v, int) and not isinstance(v, bool) for v in values) else "string"
    return {"type": kind, "enum": values}


def const(value: str) -> Schema:
    return {"type": "string", "enum": [value]}


def items(item: Schema, max_items: int, min_items: int = 0) -> Schema:
    """A list of at most ``max_items`` items (no duplicates is not enforced: callers dedupe)."""
    return {"type": "array", "items": item, "minItems": int(min_items), "maxItems": int(max_items)}


def obj(**props: Schema) -> Schema:
    """An object with exactly these keys, in this order, all required."""
    return {"type": "object", "properties": dict(props), "required": list(props), "additionalProperties": False}


def any_of(*options: Schema) -> Schema:
    return {"anyOf": list(options)}


# ---- reading a reply --------------------------------------------------------------------------
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?```\s*$", re.S)


def load_json(reply: str, constrained: bool) -> Any:
    """The JSON value of a reply.

    Constrained replies are the value itself (``json.loads``). Unconstrained ones may wrap it in a
    code fence or put prose before it: then the first ``{`` or ``[`` is decoded once, and what
    follows the value is ignored; no later bracket is tried.
    """
    s = reply.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
    try:
        return json.loads(s)
    except ValueError:
        if constrained:
            raise SchemaError("the reply is not JSON") from None
    starts = [i for i in (s.find("{"), s.find("[")) if i >= 0]
    if not starts:
        raise SchemaError("no JSON object or array in the reply")
    try:
        value, _ = json.JSONDecoder().raw_decode(s[min(starts):])
    except ValueError as e:
        raise SchemaError(f"the JSON in the reply does not parse ({e.msg})") from None
    return value


def validate(value: Any, schema: Schema) -> Any:
    """``value`` if it satisfies ``schema`` (jsonschema, draft 2020-12), else :class:`SchemaError`."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = e.json_path if e.path else "the reply"
        raise SchemaError(f"{where}: {e.message[:200]}")
    return value


def parse_reply(reply: str, schema: Schema, constrained: bool = False) -> Any:
    """Load and validate a (complete, not truncated) reply."""
    return validate(load_json(reply, constrained), schema)
