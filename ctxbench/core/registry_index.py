"""Which module registers which name, read from the source without importing it.

Every registration is a call ``register("kind", "name"[, aliases=("a", ...)])`` with literal strings
(a decorator or a plain call); this module finds those calls in the text of every ``.py`` file of the registered packages. ``tests/test_registry_index.py`` checks that
the index equals what importing everything registers, so a registration the reader cannot see
(a name built at run time) fails there, not silently at ``ls``.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
from typing import Any


def _package_dir(package: str) -> str | None:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def _modules(package: str) -> list[tuple[str, str]]:
    """(module name, file) of every module under ``package``, sorted."""
    root = _package_dir(package)
    if root is None:
        return []
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__"))
                         and os.path.exists(os.path.join(folder, d, "__init__.py")))
        rel = os.path.relpath(folder, root)
        prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
        for f in sorted(files):
            if f.endswith(".py"):
                out.append((prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}", os.path.join(folder, f)))
    return out


_CALL = re.compile(r"""(?<![\w.])register\(\s*["']([^"']+)["']\s*,\s*["']([^"']+)["']\s*(?:,\s*aliases=\(([^)]*)\)\s*,?\s*)?\)""")
_STRING = re.compile(r"""["']([^"']+)["']""")


def registrations(source: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(kind, name, aliases) of each ``register("kind", "name", aliases=(...))`` call in ``source``."""
    return [(kind, name, tuple(_STRING.findall(alias_src or ""))) for kind, name, alias_src in _CALL.findall(source)]


@functools.lru_cache(maxsize=None)
def _scan(packages: tuple[str, ...]) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    entries: dict[str, dict[str, str]] = {}
    alias_map: dict[str, dict[str, str]] = {}
    for package in packages:
        for module, path in _modules(package):
            with open(path, encoding="utf-8") as f:
                source = f.read()
            if "register(" not in source:
                continue
            for kind, name, names in registrations(source):
                prev = entries.setdefault(kind, {}).setdefault(name, module)
                if prev != module:
                    raise ValueError(f"{kind} {name!r} registered twice: in {prev} and in {module}")
                for a in names:
                    alias_map.setdefault(kind, {})[a] = name
    return entries, alias_map


class _ByKind(dict):
    def __missing__(self, kind: str) -> dict[str, Any]:
        return {}


def entries(packages: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """kind → name → the module that registers it."""
    return _ByKind(_scan(tuple(packages))[0])


def aliases(packages: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """kind → alias → name."""
    return _ByKind(_scan(tuple(packages))[1])
