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
    meta = {"meaning": meaning, "range": bound, "choices": choices, "items": items, "length": length,
            "nonempty": nonempty, "url": url, "open": open, "values": values, "plugins": plugins}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: _copy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _required_default(f: dataclasses.Field) -> Any:
    return REQUIRED  # a field without a default (a plug-in's ``x: int``): the user must set it


def nested(schema: type, meaning: str) -> Any:
    """A mapping of keys (its own schema); null switches it off where the code allows."""
    return dataclasses.field(default_factory=schema, metadata={"meaning": meaning, "schema": schema})


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


def defaults(schema: Any) -> dict[str, Any]:
    """The schema's defaults as plain data, in declaration order (what ConfigStore holds)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        if "schema" in f.metadata:
            out[f.name] = defaults(f.metadata["schema"])
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = _required_default(f)
    return out


def walk(schema: Any, prefix: str = ""):
    """(dotted key, field) for every key of ``schema``, a mapping before its keys."""
    for f in dataclasses.fields(schema):
        yield prefix + f.name, f
        if "schema" in f.metadata:
            yield from walk(f.metadata["schema"], f"{prefix}{f.name}.")


def find(schema: Any, dotted: str) -> dataclasses.Field | None:
    """The field of ``dotted`` in ``schema``; below a free mapping, that mapping's field."""
    node, f = schema, None
    for part in dotted.split("."):
        if node is None:
            return f if f is not None and f.metadata.get("values") is not None else None
        f = next((x for x in dataclasses.fields(node) if x.name == part), None)
        if f is None:
            return None
        node = f.metadata.get("schema")
    return f


def type_names(f: dataclasses.Field) -> tuple[set[str], bool]:
    """(type names, nullable) from a field's annotation: ``int | None`` → ({'int'}, True)."""
    if "schema" in f.metadata:
        return {"dict"}, True  # a mapping (lora, graph, deepspeed) may be switched off with null
    text = f.type.__name__ if isinstance(f.type, type) else str(f.type)
    names = {t.strip() for t in text.split("|")}
    nullable = "None" in names
    names.discard("None")
    names.discard("Any")
    if "dict" in names:
        nullable = True
    return names, nullable
