"""Nested config dicts as dotted keys: ``{"a": {"b": 1}}`` ↔ ``{"a.b": 1}``.

Used where two configs are compared key by key (a run folder's recorded config, a checkpoint's
saved method/model config). An empty dict is a leaf, like any other value.
"""
from __future__ import annotations

from typing import Any


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` for every leaf of nested ``d``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """Set ``d["a"]["b"] = value`` for ``key="a.b"``, making the dicts on the way."""
    *path, last = key.split(".")
    for p in path:
        if not isinstance(d.get(p), dict):
            d[p] = {}
        d = d[p]
    d[last] = value
