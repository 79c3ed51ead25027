"""A plug-in's settings as a config option: ``memory=lastturns`` composes like ``memory=rag``.

A plug-in class (or function) may carry a ``Settings`` dataclass: its fields become the option's keys
(``memory.n_turns``), typed and bounded like a built-in's (plain fields, or fields made with
:func:`ctxbench.config.setting.setting`). :func:`add_option` stores the option in Hydra's ConfigStore
(group ``memory``, name ``lastturns``: ``name`` first, then the settings' defaults), so Hydra composes,
overrides and sweeps it (``-m memory.n_turns=1,5``), and hands the schema to the compose-time check.
Nothing is written to ctxbench's ``conf/``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ctxbench.config.setting import defaults, setting

# the config group an option of each registry kind lives in (metrics, judges and answer prompts are named in lists)
GROUP_OF_KIND = {"memory": "memory", "method": "method", "dataset": "dataset"}
_stored: set[tuple[str, str]] = set()


def settings_of(obj: Any) -> Any:
    """The plug-in's ``Settings`` dataclass, or None when it has none."""
    s = getattr(obj, "Settings", None)
    return s if s is not None and dataclasses.is_dataclass(s) else None


def option_schema(name: str, obj: Any) -> type:
    """The option's schema: ``name`` (the registry name it builds) and the plug-in's settings."""
    base = settings_of(obj)
    name_field = ("name", str, setting(name, "the registered name this config builds (ctxbench ls lists them)"))
    own = [f.name for f in dataclasses.fields(base)] if base is not None else []
    if "name" in own:
        from ctxbench.core.plugins import PluginError

        raise PluginError(f"{name!r}: its Settings declare 'name', which is the registry name ctxbench sets")
    cls_name = f"{getattr(obj, '__name__', 'Plugin')}Settings"
    return dataclasses.make_dataclass(cls_name, [name_field], bases=(base,) if base is not None else (),
                                      namespace={"__doc__": (getattr(obj, "__doc__", None) or "").strip()
                                                 or f"plug-in {name}"})


def add_option(kind: str, name: str, obj: Any) -> None:
    """Make ``<group>=name`` a config option of the plug-in ``obj`` (once per process)."""
    group = GROUP_OF_KIND.get(kind)
    if group is None or (group, name) in _stored:
        return
    from hydra.core.config_store import ConfigStore

    from ctxbench.config.schemas import add_plugin_schema

    schema = option_schema(name, obj)
    node = defaults(schema)
    node = {"name": name, **{k: v for k, v in node.items() if k != "name"}}
    ConfigStore.instance().store(group=group, name=name, node=node, provider="plugin")
    add_plugin_schema(group, name, schema)
    _stored.add((group, name))


def forget() -> None:
    """Take every plug-in option back out of the ConfigStore and the schemas (tests; ``plugins.reset()``)."""
    from hydra.core.config_store import ConfigStore

    from ctxbench.config import schemas
    from ctxbench.config.schema import schema as key_table

    repo = ConfigStore.instance().repo
    for group, name in _stored:
        repo.get(group, {}).pop(f"{name}.yaml", None)
    _stored.clear()
    schemas._PLUGIN_SCHEMAS.clear()
    key_table.cache_clear()
