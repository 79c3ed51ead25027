"""Every config key's schema: one dataclass per command (conf/<command>.yaml) and per family of group options.

A group option (conf/method/lococo.yaml) starts its defaults list with ``/schema/method/lococo@_here_``
(Hydra's "schema for config files" pattern) and keeps only what differs from it; a command's primary
config starts with ``/schema/<command>@_here_``. :func:`register` puts every schema's defaults into
Hydra's ConfigStore, so it must run before anything composes (the CLI does it, tests/conftest.py too).

The ConfigStore holds plain defaults, not typed nodes: OmegaConf 2.3 typed nodes take no unions
(``concurrency: auto | int``, ``rope_scaling_factor: float | 'auto'``) and would rewrite values
(``1000`` → ``1000.0``); the types and bounds are checked once composed, in one line each
(:func:`ctxbench.config.schema.check_types`).
"""
from __future__ import annotations

import importlib
from typing import Any

GROUPS = ("model", "method", "dataset", "launcher", "logger", "memory", "task", "llm", "embedder")
COMMANDS = ("train", "eval", "bench", "score", "report", "data", "export", "ls", "reproduce", "view", "check", "new")
_registered = False
# plug-ins' settings (ctxbench.config.plugin_options): group -> option name -> its schema, beside the built-ins'
_PLUGIN_SCHEMAS: dict[str, dict[str, Any]] = {}


def group_schemas(group: str) -> dict[str, Any]:
    """Schema node name (``lococo``) → schema class, for one config group (plug-ins' options included)."""
    return {**importlib.import_module(f"ctxbench.config.schemas.{group}").SCHEMAS, **_PLUGIN_SCHEMAS.get(group, {})}


def schemas_named(group: str, name: Any) -> tuple[Any, ...]:
    """The schemas an option composing to ``name: NAME`` may come from (the first that has a key wins)."""
    if name is not None and str(name) in _PLUGIN_SCHEMAS.get(group, {}):
        return (_PLUGIN_SCHEMAS[group][str(name)],)
    by_name = importlib.import_module(f"ctxbench.config.schemas.{group}").BY_NAME
    return by_name.get(str(name), ()) if name is not None else ()


def add_plugin_schema(group: str, name: str, schema: Any) -> None:
    """A plug-in's settings become the schema of option ``group=name`` (types and bounds checked like a built-in's)."""
    _PLUGIN_SCHEMAS.setdefault(group, {})[name] = schema
    from ctxbench.config.schema import schema as key_table

    key_table.cache_clear()


def command_schema(command: str) -> Any:
    from ctxbench.config.schemas.commands import SCHEMAS

    return SCHEMAS[command]


def register() -> None:
    """Store every schema's defaults in Hydra's ConfigStore (group ``schema``); once per process."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    from ctxbench.config.setting import defaults

    cs = ConfigStore.instance()
    for command in COMMANDS:
        cs.store(group="schema", name=command, node=defaults(command_schema(command)))
    for group in GROUPS:
        for node, schema in group_schemas(group).items():
            cs.store(group=f"schema/{group}", name=node, node=defaults(schema))
    _registered = True


def load_option(group: str, option: str) -> Any:
    """``conf/<group>/<option>.yaml`` as composed (its schema's defaults, then its own keys), without Hydra.

    For code that reads one option on its own (``llm.model=smollm2_135m`` names a conf/model file).
    """
    from omegaconf import OmegaConf

    from ctxbench.config.setting import defaults
    from ctxbench.core.paths import conf_dir

    raw = OmegaConf.load(conf_dir() / group / f"{option}.yaml")
    base = OmegaConf.create()
    for entry in raw.pop("defaults", None) or []:
        name = str(entry).split("@")[0]
        if name == "_self_":
            continue
        if name.startswith(f"/schema/{group}/"):
            base = OmegaConf.merge(base, defaults(group_schemas(group)[name.rsplit("/", 1)[1]]))
        else:  # another option of the same group it extends
            base = OmegaConf.merge(base, load_option(group, name))
    return OmegaConf.merge(base, raw)


def load_conf_file(path: Any) -> Any:
    """A config file as composed from its schema: ``conf/<group>/<option>.yaml`` (:func:`load_option`) or a
    command's ``conf/<command>.yaml`` (its schema's defaults, then its own keys; the defaults list dropped)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from ctxbench.config.setting import defaults

    p = Path(path).resolve()
    if p.parent.parent.name == "conf":
        return load_option(p.parent.name, p.stem)
    raw = OmegaConf.load(p)
    raw.pop("defaults", None)
    from ctxbench.config.schemas.commands import SCHEMAS

    if p.stem not in SCHEMAS:  # a command whose YAML still holds every key itself (reproduce)
        return raw
    return OmegaConf.merge(defaults(command_schema(p.stem)), raw)
