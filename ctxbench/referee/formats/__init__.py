"""The registry of artifact formats (``score format=NAME``): one module per format, each a class
registered as ``@register("format", NAME)`` with ``name``, ``description``, ``metrics`` (what
``score`` computes when ``metrics=`` is left at its default) and ``read(path) -> list[ArtifactRow]``."""
from __future__ import annotations

from typing import Any

from ctxbench.core.registry import get, names


def format_names() -> list[str]:
    return sorted(names("format"))


def get_format(name: str) -> Any:
    """The format class registered as ``name`` (an unknown name: the registry's "did you mean")."""
    return get("format", name)
