"""The compose-time check: every value has its schema's type (then its bound), one line on failure.

The types are the annotations of the schemas in :mod:`ctxbench.config.schemas` (``int | None``,
``float | str``); a config group's key takes what any of its schemas allows for it
(``method.rope_scaling_factor`` is a float or 'auto'). The check also sees the key and the value, so
its error is one line: ``config key 'trainer.max_steps' must be int, got 'abc'``.

Rules: int→float is fine (``trainer.lr=1``); a str key takes any scalar (Hydra reads ``path=2024``
as an int); null is fine where the annotation says ``| None``, and for a mapping (it switches the
mapping off); a value that is still an interpolation (``${...}``) is checked once resolved, and
skipped if it cannot be resolved yet; keys added with ``+key=...`` (in no schema) are not checked.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator

from ctxbench.config.schemas import GROUPS, command_schema, group_schemas
from ctxbench.config.setting import type_names, walk
from ctxbench.core.errors import ConfigError
from ctxbench.core.paths import conf_dir

CONF_DIR = conf_dir()
# groups that set values of other configs rather than define keys of their own
NOT_SCHEMA_GROUPS = {"experiment", "sweep", "scale"}
PY_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "dict": dict}


class ConfigTypeError(ConfigError):
    """A config value of the wrong type; the message is one line naming key, type and value."""


@dataclass
class KeyType:
    """What a config key accepts: some of int/float/bool/str/list/dict, and maybe null."""

    types: set[str] = field(default_factory=set)
    nullable: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        return any(_is(value, t) for t in self.types)

    def describe(self) -> str:
        order = [t for t in PY_TYPES if t in self.types]
        return " or ".join(order + (["null"] if self.nullable else []))


def _is(value: Any, type_name: str) -> bool:
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_name == "str":  # Hydra parses path=2024 as an int, true as a bool: any scalar is a string
        return isinstance(value, (str, int, float, bool))
    return isinstance(value, PY_TYPES[type_name])


def command_groups(command: str) -> tuple[str, ...]:
    """The config groups whose keys a command's config may hold (every group: a `+group=` may add one)."""
    return GROUPS


@lru_cache(maxsize=None)
def schema(command: str) -> dict[str, KeyType]:
    """Dotted key → :class:`KeyType`: the command's own keys, then every group's (the union of its schemas)."""
    out: dict[str, KeyType] = {}
    sources = [("", command_schema(command))]
    sources += [(g + ".", s) for g in command_groups(command) for s in group_schemas(g).values()]
    for prefix, source in sources:
        for key, f in walk(source, prefix):
            types, nullable = type_names(f)
            kt = out.setdefault(key, KeyType())
            kt.types |= types
            kt.nullable = kt.nullable or nullable
    return out


def check_types(cfg: Any, command: str) -> None:
    """Raise :class:`ConfigTypeError` for the first value whose type its YAML default rules out.

    Then (every type being right) :class:`ctxbench.core.errors.ConfigError` for the first value outside
    its range or its choices (:mod:`ctxbench.config.bounds`): ``trainer.lr=0``, ``trainer.scheduler=foo``.
    """
    from ctxbench.config.bounds import check_bounds

    table = schema(command)
    values = list(config_values(cfg))
    for key, value in values:
        kt = table.get(key)
        if kt is None or not kt.types:  # a key added with +key=..., or one typed nowhere
            continue
        if not kt.accepts(value):
            raise ConfigTypeError(f"config key {key!r} must be {kt.describe()}, got {_show(value)}")
    check_bounds(cfg, iter(values), command)


def config_values(cfg: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, plain value) over a composed config, descending into mappings; ``hydra`` skipped.

    A mapping is yielded (as a dict) before its keys. Unresolvable interpolations and ``???`` are left out.
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    for key in cfg.keys():
        path = f"{prefix}{key}"
        if path == "hydra" or OmegaConf.is_missing(cfg, key):
            continue
        try:
            value = cfg[key]
        except Exception:  # an interpolation that resolves only at run time (${now:...}, ${hydra:...})
            continue
        if isinstance(value, DictConfig):
            yield path, {}
            yield from config_values(value, path + ".")
        elif isinstance(value, ListConfig):
            try:
                yield path, OmegaConf.to_container(value, resolve=True)
            except Exception:  # an item that resolves only at run time
                continue
        else:
            yield path, value


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unknown_key_message(cfg: Any, key: str) -> str:
    """``unknown config key 'trainer.max_step'. Did you mean 'trainer.max_steps'?`` (difflib over that node)."""
    from omegaconf import DictConfig

    parts, node, known = key.split("."), cfg, []
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            break
        if part in node:
            known.append(part)
            node = node._get_node(part)
            continue
        keys = [str(k) for k in node.keys() if not (i == 0 and k == "hydra")]
        close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
        where = ".".join(known)
        if close:
            fixed = ".".join(known + close + parts[i + 1:])
            return f"unknown config key {key!r}. Did you mean {fixed!r}?"
        listing = ", ".join(sorted(keys)[:30])
        return f"unknown config key {key!r} ({where or 'top-level'} keys: {listing}; use +{key}=... to add a new key)"
    return f"unknown config key {key!r} (use +{key}=... to add a new key)"


def unknown_key_line(command: str, overrides: list[str], e: BaseException) -> str | None:
    """For ``Could not override 'KEY'`` (KEY not in the config): compose without it and suggest a key.

    Called inside Hydra's ``initialize_config_dir`` (as :func:`ctxbench.__main__.check_overrides` does).
    """
    import re

    from hydra import compose

    m = re.search(r"Could not override '([^']+)'", str(e))
    cause = f"{e.__cause__!r}{e.__context__!r}"
    if not m or "Missing mandatory value" in str(e) or "not in struct" not in cause:
        return None
    key = m.group(1)
    rest = [a for a in overrides if a.lstrip("+~").split("=", 1)[0] != key]
    try:
        cfg = compose(config_name=command, overrides=rest)
    except Exception:
        return f"unknown config key {key!r} (use +{key}=... to add a new key)"
    return unknown_key_message(cfg, key)
