"""Names → classes and functions, for ``ls``, "did you mean", and tests that cover every entry.

A module registers what it defines with ``@register(kind, name)``; :func:`discover` imports every
module of the packages below once, so adding a method is adding one file (and one config).
Objects are built one way everywhere: ``build(kind, cfg, **deps)`` looks ``cfg.name`` up and calls
the factory with the config and its dependencies.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Any, Callable

from ctxbench.core.errors import CtxbenchError

KINDS = ("model", "method", "memory", "dataset", "metric", "judge", "llm", "embedder", "bench", "table", "task", "format")
PACKAGES = (
    "ctxbench.models",
    "ctxbench.methods",
    "ctxbench.memory",
    "ctxbench.data",
    "ctxbench.metrics",
    "ctxbench.llm",
    "ctxbench.report",
    "ctxbench.bench",
    "ctxbench.evaluation.tasks",
    "ctxbench.referee",
)

SYSTEM_KINDS = ("method", "memory")  # checked against the System contract (ctxbench.core.system) at registration
_REGISTRY: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
_ALIASES: dict[str, dict[str, str]] = {k: {} for k in KINDS}
_discovered = False


class UnknownName(CtxbenchError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


def register(kind: str, name: str, aliases: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    if kind not in _REGISTRY:
        raise ValueError(f"unknown registry kind {kind!r}; kinds are {', '.join(KINDS)}")

    def deco(obj: Any) -> Any:
        if kind in SYSTEM_KINDS:
            from ctxbench.core.system import check_system

            check_system(kind, name, obj)
        prev = _REGISTRY[kind].get(name)
        if prev is not None and prev is not obj and _qual(prev) != _qual(obj):
            raise ValueError(f"{kind} {name!r} registered twice: {_qual(prev)} and {_qual(obj)}")
        _REGISTRY[kind][name] = obj
        for a in aliases:
            _ALIASES[kind][a] = name
        return obj

    return deco


def _qual(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def discover() -> None:
    """Import every module of the registered packages (once)."""
    global _discovered
    if _discovered:
        return
    for pkg_name in PACKAGES:
        try:
            pkg = importlib.import_module(pkg_name)
        except ModuleNotFoundError as e:
            if e.name == pkg_name:
                continue
            raise
        for mod in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            importlib.import_module(mod.name)
    _discovered = True


def names(kind: str) -> list[str]:
    discover()
    return sorted(_REGISTRY[kind])


def aliases(kind: str) -> dict[str, str]:
    discover()
    return dict(_ALIASES[kind])


def suggest(name: str, choices: list[str], *, cutoff: float = 0.5, label: str = "Available",
            show: int | None = None) -> str:
    """`` Did you mean 'x'? Available: a, b, c.`` (the first ``show`` choices listed, then how many in all)."""
    close = difflib.get_close_matches(name, choices, n=3, cutoff=cutoff)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    listed = sorted(choices) if show is None else sorted(choices)[:show]
    more = f", ... ({len(choices)} in all)" if show is not None and len(choices) > show else ""
    return f"{hint} {label}: {', '.join(listed)}{more}."


def get(kind: str, name: str) -> Any:
    discover()
    if kind not in _REGISTRY:
        raise UnknownName(f"unknown registry kind {kind!r}.{suggest(kind, list(KINDS))}")
    name = _ALIASES[kind].get(name, name)
    try:
        return _REGISTRY[kind][name]
    except KeyError:
        raise UnknownName(f"unknown {kind} {name!r}.{suggest(name, list(_REGISTRY[kind]))}") from None


def build(kind: str, cfg: Any, **deps: Any) -> Any:
    """Build the object named by ``cfg.name`` with ``factory(cfg, **deps)``."""
    name = cfg.get("name") if hasattr(cfg, "get") else None
    if not name:
        raise UnknownName(f"the {kind} config has no 'name' key.{suggest('', names(kind))}")
    return get(kind, name)(cfg, **deps)
