"""``python -m ctxbench data {stats,download,list} NAME [key=value ...]`` (Hydra app ``conf/data.yaml``).

- ``stats NAME``: load ``conf/dataset/NAME.yaml`` (with ``path=`` / ``+dataset.KEY=VALUE``
  overrides) and print counts per category and the quirks the loader handled;
- ``download NAME [dest=...] [url=...] [force=true] [limit=N]``: fetch the real files;
- ``list``: every downloadable dataset and whether its default file is present.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ctxbench.config.schemas import load_option
from ctxbench.core import registry
from ctxbench.core.paths import conf_dir
from ctxbench.data.download import download
from ctxbench.data.errors import DataError
from ctxbench.data.sources import SOURCES, default_path
from ctxbench.data.stats import dataset_stats, format_stats

CONF_DATASET = conf_dir() / "dataset"
ACTIONS = ("stats", "download", "list")


def dataset_config(name: str, path: str | None = None, extra: Any = None) -> Any:
    yaml = CONF_DATASET / f"{name}.yaml"
    if not yaml.exists():
        options = sorted(p.stem for p in CONF_DATASET.glob("*.yaml"))
        raise DataError(f"dataset {name!r}", f"no config conf/dataset/{name}.yaml.{registry.suggest(name, options)}")
    cfg = load_option("dataset", name)  # the file keeps only what differs from its schema
    if extra:
        cfg = OmegaConf.merge(cfg, extra)
    if path:
        cfg.path = str(path)
    return cfg


def stats(name: str, path: str | None = None, extra: Any = None) -> dict[str, Any]:
    cfg = dataset_config(name, path, extra)
    samples = registry.build("dataset", cfg)
    return dataset_stats(samples)


def main(cfg: Any) -> None:
    action = cfg.action
    if action not in ACTIONS:
        raise DataError("data", f"unknown action {action!r}.{registry.suggest(str(action), list(ACTIONS))}")
    if action == "list":
        for name, src in SOURCES.items():
            here = "present" if default_path(name).exists() else "missing"
            print(f"{name:8s} {here:8s} {default_path(name)}  — {src.description}")
        return
    name = cfg.name
    if not name:
        raise DataError("data", "say which dataset: python -m ctxbench data ACTION NAME (or name=NAME)")
    if action == "download":
        download(str(name), dest=cfg.dest, url=cfg.url, force=cfg.force,
                 limit=cfg.limit)
        return
    st = stats(str(name), cfg.path, cfg.dataset)
    if cfg.format == "json":
        print(json.dumps(st, indent=2))
    else:
        print(format_stats(str(name), st), end="")
    if cfg.out:
        Path(cfg.out).write_text(json.dumps(st, indent=2) + "\n")
