"""Harmless variants of a structured reply, normalised before it is validated (:func:`.schema.read_reply`).

The schema stays the contract: a reply is valid when its value satisfies the schema, after at most
these rewrites of what a faithful model writes when the server does not enforce the schema (a
``json_object`` server, free text). Each is applied only to a part of the value that fails its own
(sub)schema, and only counts when the whole value then validates; the kinds are counted per reply
(``structured|<phase>|<kind>|normalised:<variant>``, :mod:`ctxbench.metrics.structured`):

- ``fence``: the JSON value inside a code fence (```json ... ```);
- ``prose``: prose before the value (and anything after it): the first ``{`` or ``[`` is decoded,
  once, never a later bracket (it may lie inside a string literal of a cut reply);
- ``whitespace``, ``quotes``: a string with surrounding whitespace, or wrapped in quotes;
- ``name_colon``: ``Name: fact`` where the schema's pattern wants a name prefix (``Name fact``):
  only for a pattern built by :func:`named_pattern`, and only a name it lists;
- ``bare_list``: a list where an object with exactly one (required) field, a list, is expected;
- ``single_object``: one object where a list of objects is expected;
- ``int_string``: an integer written as a string (``"3"``) where the schema wants an integer;
- ``enum_case``: an enum value differing only in case or surrounding whitespace (or an integer
  written for a string id: ``0`` for ``"0"``), when exactly one enum value matches.

An ``anyOf`` is normalised only when exactly one of its options can be made valid.

Nothing that changes meaning is rewritten: no item or key is dropped, no required field is
invented, no word becomes a number (``"three"``), no enum value is picked among several that
match. A server-enforced (constrained) reply goes through the same rewrites; one that needed any
is counted apart (``unenforced``: the server did not enforce the schema it was sent).
"""
from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?```\s*$", re.S | re.I)
_QUOTES = {('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`")}
_INT = re.compile(r"[+-]?\d+")
_LITERAL = re.compile(r"(?:[^\\.^$*+?{}\[\]()|]|\\.)+")  # an alternative with no regex operator


class NotJSON(ValueError):
    """The reply holds no JSON value (the message says why)."""


# ---- reading the JSON value of a reply -----------------------------------------------------------
def read_json(reply: str, kinds: list[str]) -> Any:
    """The JSON value of ``reply``: the whole reply, else inside a code fence, else the first ``{`` or
    ``[`` after leading prose (``fence`` / ``prose`` appended to ``kinds``); :class:`NotJSON` if none."""
    s = reply.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
        kinds.append("fence")
    try:
        return json.loads(s)
    except ValueError:
        pass
    starts = [i for i in (s.find("{"), s.find("[")) if i >= 0]
    if not starts:
        raise NotJSON("no JSON object or array in the reply")
    try:
        value, _ = json.JSONDecoder().raw_decode(s[min(starts):])
    except ValueError as e:
        raise NotJSON(f"the JSON in the reply does not parse ({e.msg})") from None
    kinds.append("prose")
    return value


# ---- a pattern that wants a name prefix --------------------------------------------------------
def named_pattern(names: list[str], rest: str) -> str:
    """``^(name1|name2...)`` + ``rest``: a string that starts with one of ``names`` (:func:`name_prefixes`
    reads them back, so ``Name: ...`` can be normalised to ``Name ...``)."""
    return "^(" + "|".join(re.escape(n) for n in names) + ")" + rest


def name_prefixes(pattern: str) -> list[str]:
    """The names a :func:`named_pattern` starts with; ``[]`` for any other pattern."""
    if not pattern.startswith("^("):
        return []
    body, i = pattern[2:], 0
    while i < len(body) and body[i] != ")":  # the group ends at the first unescaped ")"
        i += 2 if body[i] == "\\" else 1
    alts = body[:i].split("|") if i < len(body) else []
    if not alts or not all(_LITERAL.fullmatch(a) for a in alts):
        return []
    return [re.sub(r"\\(.)", r"\1", a) for a in alts]


# ---- normalising a value against its schema ----------------------------------------------------
def _valid(value: Any, schema: dict[str, Any]) -> bool:
    import jsonschema

    return jsonschema.Draft202012Validator(schema).is_valid(value)


def normalise(value: Any, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """``value`` with its harmless variants rewritten where it fails ``schema``, and the kinds applied
    (each once; the caller validates the result: the kinds count only if it is valid)."""
    kinds: list[str] = []
    value = _fix(value, schema, kinds)
    return value, list(dict.fromkeys(kinds))


def _fix(value: Any, schema: dict[str, Any], kinds: list[str]) -> Any:
    if _valid(value, schema):
        return value
    if "anyOf" in schema:
        fixed = []
        for option in schema["anyOf"]:
            mine: list[str] = []
            out = _fix(value, option, mine)
            if mine and _valid(out, option):
                fixed.append((out, mine))
        if len(fixed) != 1:  # none, or ambiguous: left as written
            return value
        kinds += fixed[0][1]
        return fixed[0][0]
    fixer = _FIXERS.get(schema.get("type"))
    return fixer(value, schema, kinds) if fixer else value


def _object(value: Any, schema: dict[str, Any], kinds: list[str]) -> Any:
    props = schema.get("properties") or {}
    if isinstance(value, list) and len(props) == 1:
        (key, sub), = props.items()
        if sub.get("type") == "array" and key in (schema.get("required") or []):
            kinds.append("bare_list")
            value = {key: value}
    if isinstance(value, dict):
        value = {k: _fix(v, props[k], kinds) if k in props else v for k, v in value.items()}
    return value


def _array(value: Any, schema: dict[str, Any], kinds: list[str]) -> Any:
    item = schema.get("items") or {}
    if isinstance(value, dict) and item.get("type") == "object":
        kinds.append("single_object")
        value = [value]
    if isinstance(value, list):
        value = [_fix(v, item, kinds) for v in value]
    return value


def _string(value: Any, schema: dict[str, Any], kinds: list[str]) -> Any:
    enum = schema.get("enum")
    if enum and isinstance(value, int) and not isinstance(value, bool) and str(value) in enum:
        kinds.append("enum_case")
        return str(value)
    if not isinstance(value, str):
        return value
    s = value.strip()
    if s != value:
        kinds.append("whitespace")
    if len(s) >= 2 and (s[0], s[-1]) in _QUOTES:
        s = s[1:-1].strip()
        kinds.append("quotes")
    if enum:
        same = [e for e in enum if isinstance(e, str) and e.strip().casefold() == s.casefold()]
        if len(same) == 1 and same[0] != s:
            kinds.append("enum_case")
            s = same[0]
    names = name_prefixes(schema.get("pattern", ""))
    if names:
        alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        m = re.match(rf"({alt})\s*:\s*(\S.*)$", s, re.S)
        if m:
            kinds.append("name_colon")
            s = f"{m.group(1)} {m.group(2)}"
    return s


def _integer(value: Any, schema: dict[str, Any], kinds: list[str]) -> Any:
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        kinds.append("int_string")
        return int(value.strip())
    return value


_FIXERS = {"object": _object, "array": _array, "string": _string, "integer": _integer}
