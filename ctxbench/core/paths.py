"""Where ctxbench's own files live: the Hydra configs, the shipped samples and the source checkout.

The configs (``ctxbench/conf``) and samples (``ctxbench/samples``) are package data, so they are
found the same way in a source checkout, an editable install, ``pip install .`` and a wheel. The repo
root keeps ``conf`` and ``data/samples`` as symlinks to them, so documented paths still work there.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def conf_dir() -> Path:
    """The Hydra config folder (``config_path`` of every command)."""
    return PACKAGE_DIR / "conf"


def samples_dir() -> Path:
    """The small datasets shipped with the package (what ``dataset=*_sample`` reads)."""
    return PACKAGE_DIR / "samples"


def source_root() -> Path | None:
    """The top of the source checkout ctxbench runs from, or None when it runs from an installed copy."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "ctxbench").is_dir() else None


CACHE_ENV = "CTXBENCH_CACHE"


def cache_root() -> Path:
    """ctxbench's cache folder: ``$CTXBENCH_CACHE``, else ``~/.cache/ctxbench`` (the LLM call cache, model
    files, downloads of an installed copy). A ``CTXBENCH_CACHE`` naming a file, a folder below a file or
    a folder that cannot be written is a one-line :class:`~ctxbench.core.errors.ConfigError` naming it."""
    from ctxbench.core.errors import ConfigError
    from ctxbench.core.write_faults import folder_problem

    value = os.environ.get(CACHE_ENV)
    if not value:
        return Path.home() / ".cache" / "ctxbench"
    problem = folder_problem(value)
    if problem:
        raise ConfigError(f"{CACHE_ENV}={value}: {problem} (ctxbench keeps its caches there; point "
                          f"{CACHE_ENV} at a writable folder)")
    return Path(value).expanduser()
