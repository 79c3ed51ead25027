"""A config group's options, as Hydra's config search path holds them.

The CLI checks ``group=option`` before Hydra runs (a "did you mean" in one line): the options are asked
of Hydra's own config repository over the search path a run composes with — ctxbench's ``conf/``, what
``hydra.searchpath=[...]`` adds (a user's own config folder or package) and the ConfigStore (every
schema, and each plug-in option :mod:`ctxbench.config.plugin_options` stored) — so an option from
outside the package is never refused before Hydra sees it.
"""
from __future__ import annotations

import functools
from typing import Any

from ctxbench.core.paths import conf_dir


@functools.lru_cache(maxsize=8)  # the ConfigStore is read at each question, so options stored later are seen
def _repository(extra: tuple[str, ...] = ()) -> Any:
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.utils import create_config_search_path

    csp = create_config_search_path(str(conf_dir()))
    for path in extra:
        csp.append(provider="command-line", path=path if "://" in path else f"file://{path}")
    return ConfigRepository(config_search_path=csp)


def group_options(group: str, searchpath: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every option of ``group`` on the search path (``schema`` nodes are not options)."""
    from hydra.core.object_type import ObjectType

    return sorted(_repository(tuple(searchpath)).get_group_options(group, results_filter=ObjectType.CONFIG))


def is_group(name: str, searchpath: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether ``name`` is a config group (``memory``), not a plain key (``limit``)."""
    return name != "schema" and _repository(tuple(searchpath)).group_exists(name)
