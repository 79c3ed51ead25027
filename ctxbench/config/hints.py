"""Hints for command lines written in another tool's style: ``--limit 3`` means ``limit=3`` here.

Hydra takes ``key=value`` overrides only; argparse would answer ``unrecognized arguments: --limit``.
An argument ``--key value`` or ``--key=value`` whose key is a key of the command's config (or one
of its config groups) gets a one-line hint with the override to write instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

_MISSING = object()


def dashed_args(argv: list[str], hydra_flags: Iterable[str]) -> list[tuple[str, str, str | None]]:
    """(as written, key, value or None) for each ``--key[=value]`` / ``--key value`` that is no Hydra flag."""
    flags = set(hydra_flags)
    out = []
    for i, a in enumerate(argv):
        if not a.startswith("--") or a.split("=", 1)[0] in flags or len(a) == 2:
            continue
        name, eq, value = a[2:].partition("=")
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if not eq and nxt is not None and not nxt.startswith("-") and "=" not in nxt:
            out.append((f"{a} {nxt}", name, nxt))
        else:
            out.append((a, name, value if eq else None))
    return out


def config_key(cfg: Any, conf_dir: Path, name: str) -> str | None:
    """``name`` (or with ``-`` read as ``_``) when it is a key of ``cfg`` or a config group."""
    from omegaconf import OmegaConf

    for key in dict.fromkeys((name, name.replace("-", "_"))):
        if (conf_dir / key).is_dir() or OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING:
            return key
    return None


def dashed_key_hint(command: str, argv: list[str], conf_dir: Path, hydra_flags: Iterable[str]) -> str | None:
    """The one-line hint for the first ``--key value`` naming a config key, or None."""
    found = dashed_args(argv, hydra_flags)
    if not found:
        return None
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir), job_name=command):
            cfg = compose(config_name=command)
    except Exception:  # a config that does not compose is named by the checks that follow
        return None
    for shown, name, value in found:
        key = config_key(cfg, conf_dir, name)
        if key:
            return f"{shown!r}: settings are key=value here (Hydra), not --key; write {key}={value or 'VALUE'}"
    return None
