"""The logger group: one schema per family of conf/logger/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@configures('none')
@dataclass
class NoneLogger:
    """NoneLogger"""

    name: str = registered('none')


@configures('wandb')
@dataclass
class WandbLogger:
    """train: mirrors metrics.jsonl to Weights & Biases; eval / score / report: the results and their tables
    (ctxbench/runs/wandb_log.py). mode: online | offline | disabled (env WANDB_MODE wins)"""

    name: str = registered('wandb')
    project: str = setting('ctxbench', 'wandb project')
    entity: str | None = setting(None, "wandb entity (null = the user's default)")
    mode: str = setting('offline', 'wandb mode', choices=('online', 'offline', 'disabled'))
    tags: list = setting([], 'wandb run tags')
    group: str | None = setting(None, 'wandb group (null = under -m the sweep folder, <parent>/<name>, so a sweep is one group; eval / score / report)')
