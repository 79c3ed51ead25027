"""No dead config keys: every key of a method/memory/model/embedder option is read by code that serves its class.

(Moved from the retired tests/test_config_defaults.py: the defaults now live only in the schemas,
ctxbench/config/schemas/, so code and YAML cannot disagree; a key nothing reads still can.)
"""
from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.config.schema import config_values
from ctxbench.core import registry

CONF = Path(__file__).resolve().parents[1] / "conf"
PACKAGE = Path(__file__).resolve().parents[1] / "ctxbench"
# kinds whose options are checked, with the primary config each is composed under
KINDS = {"method": "train", "memory": "eval", "model": "train", "embedder": "eval"}
FRAMEWORK_KEYS = {"name"}  # read by the registry, not by the class


def yaml_options():
    for kind in KINDS:
        for p in sorted((CONF / kind).glob("*.yaml")):
            yield kind, p.stem


def composed(kind: str, option: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name=KINDS[kind], overrides=[f"{kind}={option}"])[kind]


def source_files(obj) -> set[Path]:
    """The files that read the config of ``obj``: its module, its classes' bases, their ``from . import``s."""
    module = sys.modules[obj.__module__]
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    if inspect.isclass(obj):
        classes.append(obj)
    mods = {module} | {sys.modules[b.__module__] for c in classes for b in inspect.getmro(c)}
    files = {Path(m.__file__) for m in mods if m.__name__.startswith("ctxbench.")}
    for f in list(files):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                for n in names:
                    g = f.parent / (n.replace(".", "/") + ".py")
                    if g.exists():
                        files.add(g)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ctxbench."):
                # the same wing's modules, imported absolutely: `from ctxbench.methods import lora` reads lora.r
                base = PACKAGE.parent / node.module.replace(".", "/")
                for g in [base.with_suffix(".py")] + [base / f"{a.name}.py" for a in node.names]:
                    if g.exists() and g.relative_to(PACKAGE).parts[0] == f.relative_to(PACKAGE).parts[0]:
                        files.add(g)
    return files


def words_in(files) -> set[str]:
    """Every string literal and attribute name in ``files``: the ways code reads a config key."""
    out: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(Path(f).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
            elif isinstance(node, ast.Attribute):
                out.add(node.attr)
    return out


@pytest.mark.parametrize("kind,option", list(yaml_options()))
def test_no_dead_yaml_keys(kind, option):
    """Each key of a method/memory/model/embedder YAML is read by a file that serves its class."""
    cfg = composed(kind, option)
    words = words_in(source_files(registry.get(kind, cfg.name))) | FRAMEWORK_KEYS
    dead = [k for k, _ in config_values(cfg) if k.split(".")[-1] not in words]
    assert not dead, f"{kind}/{option}.yaml: keys no code reads: {dead}"


def test_framework_keys_are_read_by_the_package():
    words = words_in(PACKAGE.rglob("*.py"))
    assert FRAMEWORK_KEYS <= words


def test_the_dead_key_check_would_catch_max_length():
    """model.max_length was in every model YAML and read by nothing: the check names such a key."""
    words = words_in(source_files(registry.get("model", "tiny")))
    assert "max_length" not in words and "attn_implementation" in words
