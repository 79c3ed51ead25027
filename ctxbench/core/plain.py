"""Plain data: configs as dicts and lists, their canonical fingerprint, and the differences between two.

Run folders (:mod:`ctxbench.runs.guard`) and memory stores (:mod:`ctxbench.memory.stores.records`)
both record what they were built with and refuse to resume under another config; this is the one
definition of "the same config" they share.
"""
from __future__ import annotations

import hashlib
import json
from fnmatch import fnmatchcase
from typing import Any

from ctxbench.core.dotted import flatten


def json_kind(v: Any) -> str:
    """A parsed JSON value's kind for messages: object, list, string, boolean, number or null."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(v), "null")


def plain_config(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception:  # unresolvable interpolations: keep them unresolved
        from omegaconf import OmegaConf

        return OmegaConf.to_container(cfg, resolve=False)
    return cfg


def fingerprint(config: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of ``config``."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plain_data(obj: Any) -> Any:
    """Dicts, lists and scalars only: every OmegaConf node (also inside plain dicts) resolved."""
    obj = plain_config(obj)
    if isinstance(obj, dict):
        return {k: plain_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain_data(v) for v in obj]
    return obj


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key old → new`` for every dotted key whose value differs (``<unset>`` when absent)."""
    a, b = flatten(old), flatten(new)
    missing = object()
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, missing), b.get(key, missing)
        if x != y:
            out.append(f"{key} {_show(x, missing)} → {_show(y, missing)}")
    return out


def summarize(diffs: list[str], most: int = 6) -> str:
    """The first ``most`` differences, comma-separated, then how many more."""
    head = ", ".join(diffs[:most])
    return head + (f" and {len(diffs) - most} more" if len(diffs) > most else "")


def _show(v: Any, missing: object, width: int = 60) -> str:
    if v is missing:
        return "<unset>"
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    text = " ".join(text.split())  # one line
    return text if len(text) <= width else text[: width - 1] + "…"


def without_keys(obj: dict[str, Any], patterns: tuple[str, ...], prefix: str = "") -> dict[str, Any]:
    """A copy of nested ``obj`` without the dotted keys matching ``patterns``."""
    out = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if any(fnmatchcase(key, p) for p in patterns):
            continue
        out[k] = without_keys(v, patterns, key + ".") if isinstance(v, dict) else v
    return out
