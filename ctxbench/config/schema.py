"""Config types, derived from the YAML defaults themselves and checked right after compose.

Why not Hydra structured configs: every method and memory system would need a dataclass repeating
each of its keys and defaults (some 300 keys, and the paper YAMLs set other values for the same
keys), so a default would live in two places again. Here the YAML files are the one source: the
type of a key is the type of its default value in ``conf/<command>.yaml`` (or, for a config group,
in any option of ``conf/<group>/*.yaml``: ``method.rope_scaling_factor`` is ``1.0`` in lococo.yaml
and ``auto`` in lococo_paper.yaml, so it takes a float or a string). Only where every YAML default
is null does :data:`NULL_DEFAULTS` name the type. The check also sees the key and the value, so its
error is one line: ``config key 'trainer.max_steps' must be int, got 'abc'``.

Rules: int→float is fine (``trainer.lr=1``); a str key takes any scalar (Hydra reads ``path=2024``
as an int); null is fine where some YAML default is null or :data:`NULLABLE` says so; a value that
is still an interpolation (``${...}``) is checked once resolved, and skipped if it cannot be
resolved yet; keys added with ``+key=...`` (not in any YAML) are not checked.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from ctxbench.core.errors import ConfigError
from ctxbench.core.paths import conf_dir

CONF_DIR = conf_dir()
# groups that set values of other configs rather than define keys of their own
NOT_SCHEMA_GROUPS = {"experiment", "sweep", "scale"}

# keys whose default is null in every YAML: the type a value must have
NULL_DEFAULTS: dict[str, str] = {
    "checkpoint": "str", "limit": "int", "judge_llm": "dict", "predictions": "str", "kind": "str",
    "name": "str", "path": "str", "dest": "str", "url": "str", "out": "str",
    "sweep_dir": "str", "metric": "str", "table": "str", "runs": "str|list",
    "trainer.resume": "str", "trainer.stop_after": "int", "trainer.warmup_steps": "int",
    "dataset.categories": "list", "dataset.conversations": "list", "dataset.episodes": "list",
    "dataset.levels": "list", "dataset.question_types": "list", "dataset.subsets": "list",
    "dataset.max_chars": "int", "dataset.subset": "str", "dataset.sessions": "int",
    "embedder.path": "str", "launcher.mixed_precision": "str", "logger.entity": "str",
    "launcher.fsdp.transformer_cls_names_to_wrap": "list",
    "llm.cache_path": "str", "llm.dtype": "str", "llm.device": "str", "llm.tokenizer": "str",
    "memory.graph.database": "str", "memory.graph.path": "str",
    "memory.max_sessions": "int", "memory.max_turns": "int", "memory.expand": "int",  # amem: null = k
    "memory.max_new_tokens": "int", "memory.answer_max_tokens": "int",  # null = the qa_prompt's cap
    "memory_systems.max_sessions": "int", "memory_systems.questions": "int",
    "eval_throughput.concurrency.questions": "int",
    "method.max_context": "int", "method.max_examples": "int", "method.n_recent": "int", "method.ingest_size": "int",
    "retrieval.faiss_threads": "int", "retrieval.ivf_nlist": "int",
}
# keys the code accepts in more types than their YAML defaults show
EXTRA_TYPES: dict[str, str] = {
    "train_step.methods": "list",    # auto | a list of method names
    "concurrency": "int",            # auto | an integer >= 1 (eval workers)
    "launcher.deepspeed": "str",     # a DeepSpeed JSON file instead of the inline dict
}
# keys with a non-null default where null still means something (documented in the YAML comment)
NULLABLE: set[str] = {
    "method.max_new_tokens",         # null = the qa_prompt's answer cap (ctxbench.qa)
    "method.max_segments",           # null = keep every segment's slots (bench kv_memory uses it)
    "method.max_session_tokens",     # null = no cap
    "method.conv_init_std",          # null = PyTorch's fan-in default
    "method.rope_scaling_factor",    # null = 1.0
    "memory.preceding_tokens",       # null = the whole previous page
    "dataset.max_episodes",          # null = all
}
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


def yaml_leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, type name) for every key of a raw YAML config; ``defaults``/``hydra`` skipped."""
    from omegaconf import DictConfig, OmegaConf

    for key in node.keys():
        if not prefix and key in ("defaults", "hydra"):
            continue
        path = f"{prefix}{key}"
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            yield path, "dict"
            yield from yaml_leaves(child, path + ".")
        elif OmegaConf.is_missing(node, key):
            yield path, "missing"
        elif OmegaConf.is_interpolation(node, key):
            yield path, "interpolation"
        else:
            value = node[key]
            yield path, "null" if value is None else _type_name(value)


def _type_name(value: Any) -> str:
    from omegaconf import DictConfig, ListConfig

    if isinstance(value, ListConfig):
        return "list"
    if isinstance(value, DictConfig):
        return "dict"
    return type(value).__name__


def schema_files(command: str) -> Iterator[tuple[str, Path]]:
    """(mount prefix, YAML file) of every file that defines keys of ``command``'s config."""
    yield "", CONF_DIR / f"{command}.yaml"
    for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir()):
        if group.name in NOT_SCHEMA_GROUPS or group.name.startswith("_"):
            continue
        for f in sorted(group.glob("*.yaml")):
            yield group.name + ".", f


@lru_cache(maxsize=None)
def schema(command: str) -> dict[str, KeyType]:
    """Dotted key → :class:`KeyType`, from the YAML defaults plus the tables above."""
    from omegaconf import OmegaConf

    out: dict[str, KeyType] = {}
    for prefix, f in schema_files(command):
        for key, t in yaml_leaves(OmegaConf.load(f), prefix):
            kt = out.setdefault(key, KeyType())
            if t == "null":
                kt.nullable = True
            elif t in PY_TYPES:
                kt.types.add(t)
    for table in (NULL_DEFAULTS, EXTRA_TYPES):
        for key, types in table.items():
            if key in out:
                out[key].types.update(types.split("|"))
    for key, kt in out.items():
        if key in NULLABLE or "dict" in kt.types:  # a mapping (lora, graph, deepspeed) may be switched off with null
            kt.nullable = True
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
    check_bounds(cfg, iter(values))


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
