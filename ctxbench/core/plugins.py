"""Plug-ins: systems, presses, datasets, metrics, judges and answer prompts that live outside ctxbench's tree.

Two ways in, one mechanism:

- **entry points** of an installed distribution, one group per registry kind a user extends
  (:data:`GROUPS`): ``[project.entry-points."ctxbench.memory"] lastturns = "mypkg:LastTurns"``. The name
  is what ``memory=lastturns`` selects, the value the object to register.
- **unpublished code**: ``plugins=path/to/file.py,my.module`` (or ``CTXBENCH_PLUGINS``, the same list):
  a file or module whose ``register("kind", "name")`` calls register it, as a built-in's do.

Names are known without importing anything: an entry point's name and distribution come from the
installed metadata, an unpublished file's names from its source (:mod:`ctxbench.core.registry_index`
reads the ``register(...)`` calls). ``ls`` therefore lists plug-ins without torch and without running
plug-in code; a plug-in is imported only when a run selects it (:func:`load`).

A broken plug-in never breaks ctxbench: an entry point that fails to import, an object that breaks
the contract, a name that clashes with a built-in or with another plug-in, an API version it does not
support — each is one line naming the distribution, shown by ``ls`` (:attr:`Plugin.problem`, where it
is known without importing) and raised (:class:`PluginError`) only when that name is selected. A
plug-in never shadows a built-in: the built-in keeps its name and the plug-in's clash is reported.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxbench.core.errors import CtxbenchError

API_VERSION = "1.0"  # ctxbench.api's version: MAJOR changes break plug-ins, MINOR only add (docs/plugins.md)
KIND_GROUPS = {"memory": "ctxbench.memory", "method": "ctxbench.method", "dataset": "ctxbench.dataset",
               "metric": "ctxbench.metric", "judge": "ctxbench.judge", "qa_prompt": "ctxbench.qa_prompt"}
GROUPS = tuple(KIND_GROUPS.values())
ENV = "CTXBENCH_PLUGINS"
FILE_MODULE_PREFIX = "ctxbench_plugin_"  # the module name a plugins= file is imported under


class PluginError(CtxbenchError, ImportError):
    """A plug-in that cannot be used: the message is one line naming its distribution (or file)."""


@dataclass
class Plugin:
    """One plug-in name, as known without importing it."""

    kind: str
    name: str
    target: str  # "module:attr" of an entry point, or the file / module of unpublished code
    distribution: str | None = None  # the installed distribution that declares the entry point
    version: str | None = None  # its version
    file: str | None = None  # unpublished code: the file (absolute)
    sha256: str | None = None  # ... and its content's hash, recorded in results.json
    problem: str | None = None  # known without importing: a clash; set after a failed load too
    others: list[str] = field(default_factory=list)  # other distributions declaring the same name

    @property
    def source(self) -> str:
        """``mypkg 0.2.0`` (a distribution) or ``plugin file.py sha256:abcd1234`` (unpublished code)."""
        if self.distribution:
            return f"{self.distribution} {self.version or '?'}"
        return f"{Path(self.file or self.target).name} sha256:{(self.sha256 or '?')[:12]}"

    def provenance(self) -> dict[str, Any]:
        """What results.json, the board, the viewer and wandb record of it."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "target": self.target}
        if self.distribution:
            out.update(distribution=self.distribution, version=self.version)
        else:
            out.update(file=self.file, sha256=self.sha256)
        return out


# ---- what is declared ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[Plugin, ...]:
    """Every entry point of every installed distribution in a ctxbench group (metadata only)."""
    from importlib.metadata import entry_points

    found = []
    for kind, group in KIND_GROUPS.items():
        for ep in entry_points(group=group):
            dist = getattr(ep, "dist", None)
            found.append(Plugin(kind, ep.name, ep.value, distribution=getattr(dist, "name", None) or "?",
                                version=getattr(dist, "version", None)))
    return tuple(found)


_files: dict[str, Plugin] = {}  # "kind/name" -> plug-in from plugins= / CTXBENCH_PLUGINS
_file_specs: list[str] = []


def requested(argv_value: str | None = None) -> list[str]:
    """The unpublished plug-ins asked for: ``CTXBENCH_PLUGINS`` then ``plugins=`` (comma or os.pathsep separated)."""
    specs: list[str] = []
    for text in (os.environ.get(ENV, ""), argv_value or ""):
        for part in text.replace(os.pathsep, ",").split(","):
            part = part.strip().strip("'\"[] ")
            if part and part not in specs:
                specs.append(part)
    return specs


def use(specs: list[str]) -> None:
    """Make the unpublished plug-ins ``specs`` (files or module names) known by name, importing nothing."""
    from ctxbench.core.registry_index import registrations

    for spec in specs:
        if spec in _file_specs:
            continue
        path = _spec_file(spec)
        source = path.read_text(encoding="utf-8")
        regs = registrations(source)
        if not regs:
            raise PluginError(f"plugins={spec}: {path} registers nothing (add register(\"memory\", \"NAME\") "
                              "from ctxbench.api to the class it defines)")
        digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
        for kind, name, _aliases in regs:
            if kind not in KIND_GROUPS:
                raise PluginError(f"plugins={spec}: register({kind!r}, {name!r}): a plug-in registers one of "
                                  f"{', '.join(KIND_GROUPS)}")
            _files[f"{kind}/{name}"] = Plugin(kind, name, spec, file=str(path), sha256=digest)
        _file_specs.append(spec)


def resolved(specs: list[str]) -> list[str]:
    """``specs`` with each file made absolute (a process started elsewhere finds it too)."""
    return [str(_spec_file(s)) if s.endswith(".py") or os.sep in s or "/" in s else s for s in specs]


def _spec_file(spec: str) -> Path:
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise PluginError(f"plugins={spec}: no such file")
        return path
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError) as e:
        raise PluginError(f"plugins={spec}: cannot find module {spec!r} ({e})") from None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise PluginError(f"plugins={spec}: no module {spec!r} on the Python path (give a .py file or an importable module)")
    return Path(found.origin)


def declared(kind: str, builtin: set[str] | frozenset[str] = frozenset()) -> dict[str, Plugin]:
    """name → :class:`Plugin` for ``kind``: unpublished code first, then entry points; a name that is a
    built-in or declared twice carries its :attr:`Plugin.problem`."""
    out: dict[str, Plugin] = {}
    for p in [p for p in _files.values() if p.kind == kind] + [p for p in _entry_points() if p.kind == kind]:
        prev = out.get(p.name)
        if prev is not None:
            if prev.source != p.source:
                prev.others.append(p.source)
                prev.problem = (f"{kind} {p.name!r} is declared by more than one plug-in: {prev.source} and "
                                f"{', '.join(prev.others)}; uninstall one")
            continue
        out[p.name] = Plugin(**{**p.__dict__, "others": []})
        if p.name in builtin:
            out[p.name].problem = (f"{kind} {p.name!r} from {p.source} has the name of a built-in: the built-in is "
                                   f"used; rename the plug-in's entry point")
    return out


# ---- loading -------------------------------------------------------------------------------------
def load(p: Plugin) -> Any:
    """Import the plug-in's object; one :class:`PluginError` line naming its source when it cannot be."""
    if p.problem:
        raise PluginError(p.problem)
    if p.file is not None:
        return _load_file(p)
    module_name, _, attr = p.target.partition(":")
    try:
        obj = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - any failure of someone else's code is one line
        raise PluginError(f"{p.kind} {p.name!r} from {p.source}: cannot load {p.target!r}: "
                          f"{type(e).__name__}: {_first_line(e)}") from None
    check_api(p, obj)
    return obj


_loaded_files: dict[str, Any] = {}


def _load_file(p: Plugin) -> Any:
    """Import unpublished code once (its register() calls register its objects)."""
    key = str(p.file)
    if key in _loaded_files:
        return _loaded_files[key]
    try:
        if p.target.endswith(".py") or os.sep in p.target or "/" in p.target:
            mod_name = FILE_MODULE_PREFIX + hashlib.sha1(key.encode()).hexdigest()[:10]
            spec = importlib.util.spec_from_file_location(mod_name, key)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(p.target)
    except CtxbenchError as e:  # a contract error raised by register() while it ran
        raise PluginError(f"{p.kind} {p.name!r} from {p.source}: {_first_line(e)}") from None
    except Exception as e:  # noqa: BLE001
        raise PluginError(f"{p.kind} {p.name!r} from {p.source}: cannot import it: {type(e).__name__}: "
                          f"{_first_line(e)}") from None
    _loaded_files[key] = module
    check_api(p, module)
    return module


def check_api(p: Plugin, obj: Any) -> None:
    """A plug-in may say which API versions it supports (``ctxbench_api = ">=1.0,<2"`` on the object or its
    module); one line when this ctxbench's :data:`API_VERSION` is not among them."""
    spec = getattr(obj, "ctxbench_api", None)
    if spec is None:
        spec = getattr(sys.modules.get(getattr(obj, "__module__", "") or ""), "ctxbench_api", None)
    if spec is None:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        ok = API_VERSION in SpecifierSet(str(spec))
    except InvalidSpecifier:
        raise PluginError(f"{p.kind} {p.name!r} from {p.source}: ctxbench_api = {spec!r} is not a version "
                          "specifier (e.g. '>=1.0,<2')") from None
    if not ok:
        raise PluginError(f"{p.kind} {p.name!r} from {p.source} supports ctxbench API {spec}; this ctxbench "
                          f"has API {API_VERSION} (docs/plugins.md: the version rule)")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


def reset() -> None:
    """Forget unpublished plug-ins and the entry-point scan (tests; a process that installs one)."""
    _files.clear()
    _file_specs.clear()
    _loaded_files.clear()
    _entry_points.cache_clear()
