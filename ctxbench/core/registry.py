"""Names → classes and functions, for ``ls``, "did you mean", and tests that cover every entry.

A module registers what it defines with ``@register(kind, name)``, so adding a method is adding one
file (and one config). Names are known without importing anything: :mod:`ctxbench.core.registry_index`
reads the ``register("kind", "name")`` calls from the packages' source, so ``ls``, ``--help`` and the
config checks answer without torch. :func:`get` imports the one module that registers the name;
:func:`discover` imports every module (the tests that cover every entry, and the index's own check).
Objects are built one way everywhere: ``build(kind, cfg, **deps)`` looks ``cfg.name`` up and calls
the factory with the config and its dependencies.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
import sys
from typing import Any, Callable

from ctxbench.core import plugins, registry_index
from ctxbench.core.errors import CtxbenchError

KINDS = ("model", "method", "memory", "dataset", "metric", "judge", "llm", "embedder", "bench", "table", "task", "format",
         "qa_prompt")
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
_ORIGIN: dict[str, dict[str, str]] = {k: {} for k in KINDS}  # the module each name was registered from
_PLUGIN: dict[str, dict[str, plugins.Plugin]] = {k: {} for k in KINDS}  # names a plug-in registered, and where from
_discovered = False


class UnknownName(CtxbenchError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


def register(kind: str, name: str, aliases: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    if kind not in _REGISTRY:
        raise ValueError(f"unknown registry kind {kind!r}; kinds are {', '.join(KINDS)}")

    origin = sys._getframe(1).f_globals.get("__name__", "?")

    def deco(obj: Any) -> Any:
        if not origin.startswith("ctxbench.") and name in _builtin(kind):  # plug-in code never shadows a built-in
            raise plugins.PluginError(f"{kind} {name!r} is a built-in name: a plug-in ({origin}) cannot register it")
        check_contract(kind, name, obj)
        prev = _REGISTRY[kind].get(name)
        if prev is not None and prev is not obj and _qual(prev) != _qual(obj):
            raise ValueError(f"{kind} {name!r} registered twice: {_qual(prev)} and {_qual(obj)}")
        _REGISTRY[kind][name] = obj
        _ORIGIN[kind][name] = origin
        declared = plugins.declared(kind).get(name) if kind in plugins.KIND_GROUPS else None
        if declared is not None and declared.file is not None and not origin.startswith("ctxbench."):
            _PLUGIN[kind][name] = declared  # unpublished code registering itself as it is imported
        for a in aliases:
            _ALIASES[kind][a] = name
        return obj

    return deco


def check_contract(kind: str, name: str, obj: Any) -> None:
    """What a kind's objects must be, checked when one registers (a system: :func:`check_system`; a metric:
    ``name``, ``version``, ``reference`` and ``score``)."""
    if kind in SYSTEM_KINDS:
        from ctxbench.core.system import check_system

        check_system(kind, name, obj)
    elif kind == "metric":
        missing = [a for a in ("name", "version", "score") if getattr(obj, a, None) is None]
        if missing:
            from ctxbench.core.system import ContractError

            raise ContractError(f"metric {name!r}: {getattr(obj, '__qualname__', obj)!r} has no {', '.join(missing)} "
                                "(a metric has name, version, reference and score(prediction, question))")


def _builtin(kind: str) -> set[str]:
    return set(registry_index.entries(PACKAGES)[kind]) | set(registry_index.aliases(PACKAGES)[kind])


def plugin_names(kind: str) -> dict[str, plugins.Plugin]:
    """name → :class:`ctxbench.core.plugins.Plugin` of every plug-in declaring a ``kind`` (nothing imported);
    a clash with a built-in or another plug-in is in its ``problem``."""
    _check_kind(kind)
    return plugins.declared(kind, _builtin(kind)) if kind in plugins.KIND_GROUPS else {}


def plugin_of(kind: str, name: str) -> plugins.Plugin | None:
    """The plug-in that registered ``name``, None for a built-in."""
    return _PLUGIN.get(kind, {}).get(name)


def builtin_names(kind: str) -> list[str]:
    """The names ctxbench's own packages register under ``kind`` (no plug-in's)."""
    _check_kind(kind)
    return sorted(registry_index.entries(PACKAGES)[kind])


def forget_plugins() -> None:
    """Drop every plug-in's registration and the plug-ins known by name (tests; a process that installs one)."""
    for kind in KINDS:
        loaded_files = [n for n, origin in _ORIGIN[kind].items() if origin.startswith(plugins.FILE_MODULE_PREFIX)]
        for name in [*_PLUGIN[kind], *loaded_files]:
            _REGISTRY[kind].pop(name, None)
            _ORIGIN[kind].pop(name, None)
        _PLUGIN[kind].clear()
    plugins.reset()


def used_plugins() -> list[dict[str, Any]]:
    """Every plug-in this process loaded, as results.json records them (``provenance.plugins``)."""
    return [p.provenance() for kind in KINDS for p in _PLUGIN[kind].values()]


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
    """Every name registered under ``kind``: read from the source and the plug-ins' metadata, nothing imported."""
    _check_kind(kind)
    usable = {n for n, p in plugin_names(kind).items() if p.problem is None}
    return sorted(set(registry_index.entries(PACKAGES)[kind]) | set(_REGISTRY[kind]) | usable)


def aliases(kind: str) -> dict[str, str]:
    _check_kind(kind)
    return {**registry_index.aliases(PACKAGES)[kind], **_ALIASES[kind]}


def _check_kind(kind: str) -> None:
    if kind not in _REGISTRY:
        raise UnknownName(f"unknown registry kind {kind!r}.{suggest(kind, list(KINDS))}")


def suggest(name: str, choices: list[str], *, cutoff: float = 0.5, label: str = "Available",
            show: int | None = None) -> str:
    """`` Did you mean 'x'? Available: a, b, c.`` (the first ``show`` choices listed, then how many in all)."""
    close = difflib.get_close_matches(name, choices, n=3, cutoff=cutoff)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    listed = sorted(choices) if show is None else sorted(choices)[:show]
    more = f", ... ({len(choices)} in all)" if show is not None and len(choices) > show else ""
    return f"{hint} {label}: {', '.join(listed)}{more}."


def get(kind: str, name: str) -> Any:
    """The object registered as ``name`` (or an alias of it); only the module that registers it is imported."""
    _check_kind(kind)
    name = aliases(kind).get(name, name)
    if name not in _REGISTRY[kind]:
        module = registry_index.entries(PACKAGES)[kind].get(name)
        if module is None:
            return _get_plugin(kind, name)
        importlib.import_module(module)
        if name not in _REGISTRY[kind]:  # the source said so, the import did not: the index read it wrong
            raise RuntimeError(f"{module} was expected to register {kind} {name!r} and did not")
    return _REGISTRY[kind][name]


def _get_plugin(kind: str, name: str) -> Any:
    """Load the plug-in declaring ``name`` (one :class:`~ctxbench.core.plugins.PluginError` line if it cannot be)."""
    p = plugin_names(kind).get(name)
    if p is None:
        raise UnknownName(f"unknown {kind} {name!r}.{suggest(name, names(kind))}")
    obj = plugins.load(p)  # unpublished code registers itself as it is imported
    if p.file is None:
        try:
            check_contract(kind, name, obj)
        except CtxbenchError as e:
            raise plugins.PluginError(f"{kind} {name!r} from {p.source}: {e}") from None
        _REGISTRY[kind][name] = obj
        _ORIGIN[kind][name] = p.target
    elif name not in _REGISTRY[kind]:
        raise plugins.PluginError(f"{kind} {name!r} from {p.source}: importing it registered no {kind} {name!r}")
    _PLUGIN[kind][name] = p
    return _REGISTRY[kind][name]


def build(kind: str, cfg: Any, **deps: Any) -> Any:
    """Build the object named by ``cfg.name`` with ``factory(cfg, **deps)``."""
    name = cfg.get("name") if hasattr(cfg, "get") else None
    if not name:
        raise UnknownName(f"the {kind} config has no 'name' key.{suggest('', names(kind))}")
    return get(kind, name)(cfg, **deps)
