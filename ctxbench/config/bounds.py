"""Range and choice checks of config values, read from each key's schema (:mod:`ctxbench.config.schemas`).

Checked right after compose (:func:`ctxbench.config.schema.check_types` calls :func:`check_bounds`),
so ``limit=-1`` or ``trainer.scheduler=foo`` fails before anything loads, in one line:
``config key 'limit' must be >= 0 (0 or null = all), got -1``. ``-m`` sweeps are checked for every
combination the same way.

Where one key means different things in different options of its group (``method.mode`` is
concat|merge for CCM, pretrain|finetune for ICAE), the option's ``name`` picks its schema.
``judge_llm.*`` is checked as ``llm.*``. null is never range-checked (the type check decides where
null is allowed; the note says what it means). Bools are never range-checked.
"""
from __future__ import annotations

from dataclasses import Field
from typing import Any, Iterator

from ctxbench.config.schemas import COMMANDS, GROUPS, command_schema, group_schemas, schemas_named
from ctxbench.config.setting import (  # noqa: F401 - re-exported: the bound kit
    COSINE, COUNT, POSITIVE, SEED, SHARE, Range, between, find, ge, gt)
from ctxbench.core.errors import ConfigError


def field_of(key: str, cfg: Any = None, command: str | None = None) -> Field | None:
    """The schema field that declares ``key`` (below a free mapping: that mapping's field).

    A group key is looked up in the schemas of the option's ``name`` first, then in every schema of the group;
    a top-level key in ``command``'s schema first (two commands may declare one name: ``format`` of data
    and of score), then in every command's.
    """
    bkey = bound_key(key)
    head, _, rest = bkey.partition(".")
    if head in GROUPS and rest:
        named = schemas_named(head, _select(cfg, key.split(".", 1)[0] + ".name"))
        for schema in (*named, *group_schemas(head).values()):
            f = find(schema, rest)
            if f is not None:
                return f
    for name in ([command] if command in COMMANDS else []) + list(COMMANDS):
        f = find(command_schema(name), bkey)
        if f is not None:
            return f
    return None


def _meta(key: str, cfg: Any = None, command: str | None = None) -> dict[str, Any]:
    """The field's bound metadata; below a free mapping (``memory.k_by_category.4``), its ``values`` range."""
    f = field_of(key, cfg, command)
    if f is None:
        return {}
    if f.name != key.rsplit(".", 1)[-1] and f.metadata.get("values") is not None:
        return {"range": f.metadata["values"]}
    return dict(f.metadata)


def _select(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    try:
        from omegaconf import OmegaConf

        return OmegaConf.select(cfg, key, default=None)
    except Exception:
        return None


def bound_key(key: str) -> str:
    """The key whose bound applies: ``judge_llm.X`` is checked as ``llm.X``."""
    return "llm." + key[len("judge_llm."):] if key.startswith("judge_llm.") else key


def range_of(key: str, cfg: Any = None) -> Range | None:
    return _meta(key, cfg).get("range")


def choices_of(key: str, cfg: Any = None) -> tuple[Any, ...] | None:
    return _meta(key, cfg).get("choices")


def problem(key: str, value: Any, cfg: Any = None, command: str | None = None) -> str | None:
    """The one-line complaint about ``key=value``, or None if the value is accepted (or not checked)."""
    meta = _meta(key, cfg, command)
    if isinstance(value, list):
        return _list_problem(meta, key, value)
    if value is None or isinstance(value, dict):
        return None
    if meta.get("url"):
        return _url_problem(key, value)
    r = meta.get("range")
    if r is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if r.accepts(value) else f"config key {key!r} must be {r.describe()}, got {value!r}"
    options = meta.get("choices")
    if options is not None and meta.get("plugins"):  # and what plug-ins of that kind declare
        from ctxbench.core.registry import plugin_names

        options = (*options, *sorted(n for n, p in plugin_names(meta["plugins"]).items() if p.problem is None))
    if options is not None and value not in options:
        listed = " | ".join(str(o).lower() if isinstance(o, bool) else str(o) for o in options)
        return f"config key {key!r} must be one of {listed}, got {value!r}"
    return None


def _list_problem(meta: dict[str, Any], key: str, value: list) -> str | None:
    nonempty = meta.get("nonempty")
    if not value and nonempty:
        return f"config key {key!r} is an empty list: {nonempty}"
    n, what = meta.get("length") or (None, "")
    if n is not None and len(value) != n:
        hint = f" ({nonempty})" if nonempty else ""
        return f"config key {key!r} must be {what}{hint}, got {value!r}"
    options = meta.get("choices")
    for i, item in enumerate(value if options is not None else ()):
        if item not in options:
            return f"config key {key!r} item {i} must be one of {' | '.join(map(str, options))}, got {item!r}"
    r = meta.get("items")
    for i, item in enumerate(value if r is not None else ()):
        if not isinstance(item, (int, float)) or isinstance(item, bool) or not r.accepts(item):
            return f"config key {key!r} item {i} must be a number {r.describe()}, got {item!r}"
    return None


def _url_problem(key: str, value: Any) -> str | None:
    import urllib.parse

    from ctxbench.core.secrets import scrub_text

    parts = urllib.parse.urlsplit(str(value))
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return f"config key {key!r} must be an http(s) URL (e.g. http://127.0.0.1:8080/v1), got {scrub_text(str(value))!r}"


def check_bounds(cfg: Any, values: Iterator[tuple[str, Any]], command: str | None = None) -> None:
    """Raise :class:`ConfigError` for the first (key, value) outside its range or choices."""
    for key, value in values:
        msg = problem(key, value, cfg, command)
        if msg:
            raise ConfigError(msg)
