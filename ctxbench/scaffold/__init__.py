"""``python -m ctxbench new memory|method|dataset|metric NAME [out=DIR]``: a ready plug-in package.

It writes, from the templates in ``ctxbench/scaffold/templates/`` (package data), a package that
installs with ``pip install -e DIR`` and is found by its entry point:

- ``pyproject.toml``: ``[project.entry-points."ctxbench.<kind>"] NAME = "NAME_pkg:Object"``;
- ``NAME_pkg/__init__.py``: the class (or a dataset's loader function) with its ``Settings`` dataclass,
  importing only ``ctxbench.api``; a memory system's prompts and scripted replies in ``NAME_pkg/prompts.py``,
  a dataset's small ``NAME_pkg/data.json``;
- ``README.md``, and ``tests/test_NAME.py`` calling the conformance checks (:mod:`ctxbench.check.pytest_plugin`).

The written code passes ``python -m ctxbench check KIND=NAME`` as it is; nothing here imports torch.
"""
from __future__ import annotations

import keyword
import re
from importlib import resources
from pathlib import Path
from typing import Any

from ctxbench.core.errors import ConfigError

KINDS = ("memory", "method", "dataset", "metric")
# per kind: the files written (template → path in the package, NAME_pkg written {pkg}) and what the entry point names
LAYOUT = {
    "memory": {"memory/__init__.py.tmpl": "{pkg}/__init__.py", "memory/prompts.py.tmpl": "{pkg}/prompts.py"},
    "method": {"method/__init__.py.tmpl": "{pkg}/__init__.py"},
    "dataset": {"dataset/__init__.py.tmpl": "{pkg}/__init__.py", "dataset/data.json.tmpl": "{pkg}/data.json"},
    "metric": {"metric/__init__.py.tmpl": "{pkg}/__init__.py"},
}
COMMON = {"common/pyproject.toml.tmpl": "pyproject.toml", "common/README.md.tmpl": "README.md",
          "common/test.py.tmpl": "tests/test_{name}.py"}
RUN = {"memory": "python -m ctxbench eval memory={name} dataset=locomo_sample",
       "method": "python -m ctxbench eval method={name} dataset=locomo_sample model=smollm2_135m",
       "dataset": "python -m ctxbench eval memory=full_context dataset={name}",
       "metric": "python -m ctxbench eval memory=full_context dataset=locomo_sample metrics=[f1,{name}]"}
CHECK_ARGS = {"memory": "", "method": ", settings={\"keep_tokens\": 64, \"max_new_tokens\": 4}, limit=4",
              "dataset": "", "metric": ""}


def class_name(name: str) -> str:
    """``last_turns`` → ``LastTurns``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Plugin"


def check_name(kind: str, name: str) -> None:
    """A plug-in name is a lowercase Python identifier that is not a built-in's."""
    if kind not in KINDS:
        raise ConfigError(f"new: kind={kind!r}: one of {', '.join(KINDS)} (python -m ctxbench new memory NAME)")
    if not name:
        raise ConfigError(f"new {kind}: name the plug-in (python -m ctxbench new {kind} NAME)")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"new {kind} {name!r}: a plug-in name is lowercase letters, digits and _ (what "
                          f"{kind}=NAME selects), starting with a letter")
    from ctxbench.core.registry import names

    if name in names(kind):
        raise ConfigError(f"new {kind} {name!r}: ctxbench has a built-in {kind} of that name; choose another "
                          "(a plug-in never shadows a built-in)")


def values(kind: str, name: str) -> dict[str, str]:
    """What the templates' ``{{key}}`` placeholders become."""
    cls = class_name(name)
    obj = "load" if kind == "dataset" else cls
    note = (" (`dataset.<key>=...`)" if kind == "dataset" else "") if kind != "metric" else \
        " (a metric has none: it is selected with metrics=[...])"
    return {"name": name, "kind": kind, "Class": cls, "obj": obj, "pkg": f"{name}_pkg", "dist": f"ctxbench-{name}",
            "run": RUN[kind].format(name=name), "check_args": CHECK_ARGS[kind], "settings_note": note}


def render(text: str, vals: dict[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: vals[m.group(1)], text)


def write_package(kind: str, name: str, out: str | Path | None = None, force: bool = False) -> list[Path]:
    """Write the plug-in package of ``kind`` ``name`` into ``out`` (default ``./ctxbench-NAME``); the paths written."""
    check_name(kind, name)
    vals = values(kind, name)
    root = Path(out) if out else Path.cwd() / vals["dist"]
    if root.exists() and not root.is_dir():
        raise ConfigError(f"new {kind} {name}: out={root} is a file")
    if root.is_dir() and any(root.iterdir()) and not force:
        raise ConfigError(f"new {kind} {name}: {root} is not empty (choose another out=, or force=true to write into it)")
    from ctxbench.runs.results import atomic_write_text

    written = []
    templates = resources.files("ctxbench.scaffold") / "templates"
    for src, dst in {**LAYOUT[kind], **COMMON}.items():
        path = root / dst.format(pkg=vals["pkg"], name=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, render((templates / src).read_text(encoding="utf-8"), vals))
        written.append(path)
    return written


def main(cfg: Any) -> list[Path]:
    """``python -m ctxbench new KIND NAME [out=DIR] [force=true]``."""
    if not cfg.kind:
        raise ConfigError("new: say what to write: python -m ctxbench new memory|method|dataset|metric NAME [out=DIR]")
    kind, name = str(cfg.kind), str(cfg.name or "")
    written = write_package(kind, name, cfg.out, bool(cfg.force))
    root = Path(cfg.out) if cfg.out else Path.cwd() / values(kind, name)["dist"]
    print(f"new {kind} {name}: wrote {len(written)} files → {root}")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: pip install -e {root} && python -m pytest {root / 'tests'} && "
          f"{RUN[kind].format(name=name)}")
    return written
