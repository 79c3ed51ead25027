"""One config key, declared once: its type (the annotation), default, bound or choices, and meaning.

Every schema under :mod:`ctxbench.config.schemas` is a dataclass whose fields are made by
:func:`setting` (a leaf key) or :func:`nested` (a mapping of keys). The schema is the only place a
default is written: :mod:`ctxbench.config.schemas` hands the defaults to Hydra's ConfigStore, each
YAML option names its schema in its defaults list and keeps only what differs from it, the
compose-time check (:mod:`ctxbench.config.schema`, :mod:`ctxbench.config.bounds`) reads the types and
bounds from here, and docs/config.md is generated from it (:mod:`ctxbench.config.docs`).

Kept light (no hydra, omegaconf, torch): the CLI imports it before composing.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

REQUIRED = "???"  # OmegaConf's missing value: the user must set the key


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where open); None = unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""  # what special values mean: "0 or null = all"

    def accepts(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        lo, hi = _num(self.low), _num(self.high)
        if self.high is None:
            text = f"{'>' if self.low_open else '>='} {lo}"
        elif self.low is None:
            text = f"{'<' if self.high_open else '<='} {hi}"
        else:
            text = f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}"
        return text + (f" ({self.note})" if self.note else "")


def _num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def ge(low: float, note: str = "") -> Range:
    return Range(low, None, note=note)


def gt(low: float, note: str = "") -> Range:
    return Range(low, None, low_open=True, note=note)


def between(low: float, high: float, low_open: bool = False, high_open: bool = False, note: str = "") -> Range:
    return Range(low, high, low_open, high_open, note)


COUNT, POSITIVE = ge(0), ge(1)  # a count that may be 0; one (or a token budget) that may not
SHARE = between(0, 1)
SEED = between(0, 2**32 - 1, note="numpy's seed range")
COSINE = between(-1, 1)


def setting(default: Any, meaning: str, bound: Range | None = None, *, choices: tuple | None = None,
            items: Range | None = None, length: tuple[int, str] | None = None, nonempty: str = "",
            url: bool = False, open: str = "", values: Range | None = None,  # noqa: A002 - reads as a word
            plugins: str = "") -> Any:
    """A leaf key. ``bound``: numeric range; ``choices``: the closed set of values (a str key), to which
    ``plugins`` (a registry kind: ``qa_prompt``) adds the names plug-ins of that kind declare;
    ``items``/``length``/``nonempty``: for a list; ``values``: the range of a free mapping's values;
    ``url``: an http(s) URL; ``open``: why a key whose meaning lists values takes others too."""
    if bound is not None and not isinstance(bound, Range):
        raise TypeError(f"setting({default!r}, ...): bound must be ge(x), gt(x) or between(a, b) (ctxbench.api), "
                        f"not {type(bound).__name__} {bound!r}")
    meta = {"meaning": meaning, "range": bound, "choices": choices, "items": items, "length": length,
            "nonempty": nonempty, "url": url, "open": open, "values": values, "plugins": plugins}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: _copy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def registered(name: str) -> Any:
    """The ``name`` key of a schema: the registered name its options build (``registry.build(group, cfg)``)."""
    return setting(name, "the registered name this config builds (ctxbench ls lists them)")


def nested(schema: type, meaning: str) -> Any:
    """A mapping of keys (its own schema); null switches it off where the code allows."""
    return dataclasses.field(default_factory=schema, metadata={"meaning": meaning, "schema": schema})


def tables() -> tuple[dict[str, type], dict[str, tuple[type, ...]]]:
    """A schema module's ``SCHEMAS`` (node → schema) and ``BY_NAME`` (registered name → its schemas), empty
    until its :func:`configures` decorators fill them."""
    return {}, {}


def configures(node: str, *names: str) -> Any:
    """Class decorator: this schema is the ConfigStore node ``schema/<group>/<node>`` (the YAML options that list
    it in their defaults compose from it) and the schema of the registered names ``names`` (default: ``node``),
    where a key's bound is looked up. It fills the schema module's ``SCHEMAS`` (node → schema) and ``BY_NAME``
    (name → schemas) tables, which :mod:`ctxbench.config.schemas` reads."""
    def decorate(schema: type) -> type:
        import sys

        module = vars(sys.modules[schema.__module__])
        module.setdefault("SCHEMAS", {})[node] = schema
        by_name = module.setdefault("BY_NAME", {})
        for name in names or (node,):
            by_name[name] = (*by_name.get(name, ()), schema)
        return schema

    return decorate


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


def fields(schema: Any) -> tuple[dataclasses.Field, ...]:
    """``dataclasses.fields(schema)`` with each field's ``type`` resolved by :func:`typing.get_type_hints`.

    A schema may be written with or without ``from __future__ import annotations`` and in any module (a
    plug-in's ``Settings``): a string annotation (``'Optional[int]'``, ``'list[str]'``, ``'Literal["a", "b"]'``,
    ``'Sub | None'``) becomes the type it names, once per class, as it would be without the future import.
    An annotation that names nothing resolvable stays a string (:func:`type_names` reads its text).
    """
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        schema = type(schema)
    _resolve(schema)
    return dataclasses.fields(schema)


_resolved: set[type] = set()


def _resolve(schema: type) -> None:
    if schema in _resolved:
        return
    import sys
    import typing

    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # one annotation names something not importable here: resolve field by field
        hints = {}
        module = vars(sys.modules.get(schema.__module__)) if schema.__module__ in sys.modules else {}
        for f in dataclasses.fields(schema):
            if isinstance(f.type, str):
                try:
                    hints[f.name] = eval(f.type, dict(module), dict(vars(schema)))  # noqa: S307 - an annotation
                except Exception:
                    continue
    for f in dataclasses.fields(schema):
        if f.name in hints:
            f.type = hints[f.name]
    _resolved.add(schema)


def sub_schema(f: dataclasses.Field) -> type | None:
    """The schema of a mapping field: ``nested(Sub, ...)``, or a field typed ``Sub`` / ``Sub | None`` (a dataclass)."""
    if "schema" in f.metadata:
        return f.metadata["schema"]
    found = [t for t in _members(f.type) if isinstance(t, type) and dataclasses.is_dataclass(t)]
    return found[0] if len(found) == 1 else None


def _members(tp: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``Optional[X]``, ``X | None``); ``(tp,)`` for anything else."""
    import types
    import typing

    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(m for a in typing.get_args(tp) for m in _members(a))
    return (tp,)


def literal_values(f: dataclasses.Field) -> tuple | None:
    """The values of a ``Literal[...]`` annotation (``Literal['a', 'b'] | None`` too); None when it has none."""
    import typing

    values = tuple(v for t in _members(f.type) if typing.get_origin(t) is typing.Literal for v in typing.get_args(t))
    return values or None


def field_choices(f: dataclasses.Field) -> tuple | None:
    """A key's closed set of values: ``setting(..., choices=...)``, else its ``Literal`` annotation's values."""
    return f.metadata.get("choices") or literal_values(f)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (a fresh copy where it has a factory)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED  # a plain field with no default: the user must set it


def defaults(schema: Any) -> dict[str, Any]:
    """The schema's defaults as plain data, in declaration order (what ConfigStore holds).

    ``schema`` is a schema class or an instance (a nested field's default: its own values)."""
    instance = None if isinstance(schema, type) else schema
    out: dict[str, Any] = {}
    for f in fields(schema):
        value = getattr(instance, f.name) if instance is not None else default_of(f)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = defaults(value)
        out[f.name] = value
    return out


def walk(schema: Any, prefix: str = ""):
    """(dotted key, field) for every key of ``schema``, a mapping before its keys."""
    for f in fields(schema):
        yield prefix + f.name, f
        sub = sub_schema(f)
        if sub is not None:
            yield from walk(sub, f"{prefix}{f.name}.")


def find(schema: Any, dotted: str) -> dataclasses.Field | None:
    """The field of ``dotted`` in ``schema``; below a free mapping, that mapping's field."""
    node, f = schema, None
    for part in dotted.split("."):
        if node is None:
            return f if f is not None and f.metadata.get("values") is not None else None
        f = next((x for x in fields(node) if x.name == part), None)
        if f is None:
            return None
        node = sub_schema(f)
    return f


#: a Python type → the config type name the checks use (a tuple is a list once in OmegaConf)
_NAMES = {int: "int", float: "float", bool: "bool", str: "str", list: "list", tuple: "list", dict: "dict"}


def type_names(f: dataclasses.Field) -> tuple[set[str], bool]:
    """(type names, nullable) from a field's annotation: ``int | None`` → ({'int'}, True).

    Reads the resolved type (:func:`fields`): ``Optional[int]``, ``list[str]`` → list, ``dict[str, int]`` → dict,
    ``Literal['a', 'b']`` → the types of its values, a dataclass → dict; ``Any`` names no type.
    """
    if sub_schema(f) is not None:
        return {"dict"}, True  # a mapping (lora, graph, deepspeed) may be switched off with null
    if isinstance(f.type, str):  # not resolvable here: its text, ``int | None``
        names = {t.strip() for t in f.type.split("|")}
        nullable = "None" in names
        names = {n.split("[")[0].lower() for n in names if n not in ("None", "Any")}
        names = {"list" if n == "tuple" else n for n in names if n in ("int", "float", "bool", "str", "list", "dict", "tuple")}
    else:
        names, nullable = _type_names(f.type)
    if "dict" in names:
        nullable = True
    return names, nullable


def _type_names(tp: Any) -> tuple[set[str], bool]:
    import typing

    names: set[str] = set()
    nullable = False
    for t in _members(tp):
        origin = typing.get_origin(t)
        if t is type(None) or t is None:
            nullable = True
        elif origin is typing.Literal:
            for v in typing.get_args(t):
                if v is None:
                    nullable = True
                else:
                    names.add(_NAMES.get(type(v), "str"))
        elif isinstance(t, type) and dataclasses.is_dataclass(t):
            names.add("dict")
        elif origin is not None and origin in _NAMES:
            names.add(_NAMES[origin])
        elif origin is not None and isinstance(origin, type) and issubclass(origin, (list, tuple)):
            names.add("list")
        elif origin is not None and isinstance(origin, type) and issubclass(origin, dict):
            names.add("dict")
        elif t in _NAMES:
            names.add(_NAMES[t])
    return names, nullable
