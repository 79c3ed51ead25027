"""A partial config filled from its schema, for code (and tests) that build one by hand.

A composed config holds every key of its schema, so the code reads ``cfg.k`` and writes no default.
Code that receives a partial mapping instead (``{"name": "rag", "k": 3}``, a judge's llm dict, a
``trainer`` built in a test) fills it here first: the option as composed, then the partial's keys.
"""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from ctxbench.config.schemas import command_schema, group_schemas, load_option, schemas_named
from ctxbench.config.setting import defaults
from ctxbench.core.paths import conf_dir


def option_config(group: str, partial: Any) -> DictConfig:
    """``partial`` (naming its ``name``) over ``conf/<group>/<name>.yaml`` as composed, or over the
    defaults of the schema that ``name`` composes from where no such option file exists. Without a
    ``name`` the partial comes back as it is (the registry's build names the missing key)."""
    partial = partial if isinstance(partial, DictConfig) else OmegaConf.create(dict(partial or {}))
    if not partial.get("name"):
        return partial
    name = str(partial["name"])
    if (conf_dir() / group / f"{name}.yaml").exists():
        base = load_option(group, name)
    else:
        schemas = schemas_named(group, name) or (group_schemas(group)[name],)
        base = OmegaConf.create(defaults(schemas[0]))
    return OmegaConf.merge(base, partial)


def command_config(command: str, partial: Any = None) -> DictConfig:
    """``partial`` over the defaults of a command's primary config (conf/<command>.yaml's schema)."""
    return OmegaConf.merge(defaults(command_schema(command)), partial or {})


def section_config(command: str, section: str, partial: Any = None) -> DictConfig:
    """``partial`` over the defaults of one mapping of a command's config (``bench.retrieval``, ``eval.judge``)."""
    return command_config(command, {section: partial or {}})[section]
