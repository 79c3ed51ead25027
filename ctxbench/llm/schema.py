"""JSON Schemas for structured replies: small builders, and parsing a reply against one.

Every structured call of a memory system declares its schema beside its prompt with these
builders, and the backend enforces it (``llm=hf``: grammar-constrained decoding, see
:mod:`.grammar`; ``llm=openai``: ``response_format`` json_schema). The builders always bound a
reply: strings have ``maxLength``, lists ``maxItems``, objects no extra keys, so a constrained
reply closes within its token budget. Ids a model may name are an ``enum`` of the ids it was
shown, so an invented id cannot be generated.

:func:`read_reply` reads a reply against its schema: the JSON value (the whole reply, or inside a
code fence, or after leading prose), validated as written; if it fails, its harmless variants
(``Name: fact`` for ``Name fact``, surrounding whitespace or quotes, a bare list for an object of one
list field, ``"3"`` for 3, an enum value in another case ...) are normalised by
:mod:`.normalize`, the documented list of what is rewritten and what never is, and the result is
validated again; the kinds it needed are returned for the caller to count. The schema stays the
contract: nothing that changes meaning is rewritten, and a reply still invalid is rejected with
the error of what the model wrote. A reply cut at the token limit is never parsed (the caller
counts it as truncated).
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.errors import CtxbenchError
from ctxbench.llm.normalize import NotJSON, named_pattern, normalise, read_json

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


def named(names: list[str], rest: str) -> Schema:
    """A string that starts with one of ``names`` followed by ``rest`` (a regex tail, ``$``-anchored):
    ``Name: ...`` is normalised to ``Name ...`` before validation (:func:`.normalize.name_prefixes`)."""
    return {"type": "string", "pattern": named_pattern(names, rest)}


# ---- reading a reply --------------------------------------------------------------------------
def load_json(reply: str, kinds: list[str] | None = None) -> Any:
    """The JSON value of a reply (:func:`.normalize.read_json`: a code fence or leading prose is
    allowed and appended to ``kinds``), else :class:`SchemaError`."""
    try:
        return read_json(reply, [] if kinds is None else kinds)
    except NotJSON as e:
        raise SchemaError(str(e)) from None


def validate(value: Any, schema: Schema) -> Any:
    """``value`` if it satisfies ``schema`` (jsonschema, draft 2020-12), else :class:`SchemaError`."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = e.json_path if e.path else "the reply"
        raise SchemaError(f"{where}: {e.message[:200]}")
    return value


def read_reply(reply: str, schema: Schema) -> tuple[Any, list[str]]:
    """The valid value of a (complete, not truncated) reply and the normalisations it needed
    (:mod:`.normalize`); :class:`SchemaError` naming what the model wrote wrong when none makes it valid."""
    kinds: list[str] = []
    value = load_json(reply, kinds)
    try:
        return validate(value, schema), kinds
    except SchemaError as first:
        fixed, more = normalise(value, schema)
        if not more:
            raise
        try:
            return validate(fixed, schema), list(dict.fromkeys(kinds + more))
        except SchemaError:
            raise first from None


def parse_reply(reply: str, schema: Schema) -> Any:
    """Load, normalise and validate a (complete, not truncated) reply: its valid value."""
    return read_reply(reply, schema)[0]
