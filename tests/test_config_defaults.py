"""Code defaults and YAML defaults agree, and no YAML key is dead (read by no code).

For every conf/<kind>/*.yaml the test finds the registered object of its ``name``, the source files
that serve it (its module, the modules of its classes' bases, and the package modules those import)
and, by parsing them, every ``cfg.get("key", LITERAL)`` / ``self.cfg.get(...)`` (``lora_cfg.get``
for ``lora.*``). Rule: a literal default equals the value of that key in every CPU (non-paper) YAML
that sets it; the ``*_paper`` YAMLs deliberately differ. Where the CPU YAMLs of one file disagree
(``positions``: absolute for H2O, cache for StreamingLLM), the code reads ``cfg["key"]`` instead.
A literal inside a builder registered for another name (``build_finetune``'s ``mode``) is that
builder's own and is not compared with the other names' YAMLs.
"""
from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.config.schema import yaml_leaves

CONF = Path(__file__).resolve().parents[1] / "conf"
PACKAGE = Path(__file__).resolve().parents[1] / "ctxbench"
# kinds whose YAMLs are checked, with the primary config each is composed under
KINDS = {"method": "train", "memory": "eval", "model": "train", "embedder": "eval"}
RECEIVERS = {"cfg": "", "self.cfg": "", "lora_cfg": "lora.", "lc": "lora.", "lora": "lora."}
FRAMEWORK_KEYS = {"name", "needs_embedder"}  # read by the registry and the evaluator, not by the class


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
            pkg = ".".join(f.parent.relative_to(PACKAGE.parent).parts)  # ctxbench.methods
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(pkg):
                rest = node.module[len(pkg) + 1:]  # a sibling module, imported absolutely
                names = [rest] if rest else [a.name for a in node.names]
                for n in names:
                    g = f.parent / (n.replace(".", "/") + ".py")
                    if g.exists():
                        files.add(g)
    return files


def _receiver(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def literal_defaults(path: Path) -> list[tuple[str, object, int, str]]:
    """(config key, literal default, line, enclosing top-level function or '') of each ``cfg.get(k, d)``."""
    out = []
    tree = ast.parse(path.read_text())
    for top in tree.body:
        scope = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else ""
        for node in ast.walk(top):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and len(node.args) == 2):
                continue
            prefix = RECEIVERS.get(_receiver(node.func.value) or "")
            key = node.args[0]
            if prefix is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            try:
                value = ast.literal_eval(node.args[1])
            except ValueError:  # a computed default (``self.k``): nothing to compare
                continue
            out.append((prefix + key.value, value, node.lineno, scope))
    return out


def registered_functions(kind: str) -> dict[str, object]:
    """``module:function`` → object, for every builder function registered under ``kind``."""
    out = {}
    for name in registry.names(kind):
        obj = registry.get(kind, name)
        if inspect.isfunction(obj):
            out[f"{obj.__module__}:{obj.__name__}"] = obj
    return out


def same(code_value, yaml_value) -> bool:
    if isinstance(code_value, bool) or isinstance(yaml_value, bool):
        return code_value is yaml_value
    return code_value == yaml_value


@pytest.mark.parametrize("kind,option", [o for o in yaml_options() if "paper" not in o[1]])
def test_code_defaults_match_the_cpu_yaml(kind, option):
    cfg = composed(kind, option)
    obj = registry.get(kind, cfg.name)
    builders = registered_functions(kind)
    wrong = []
    for f in sorted(source_files(obj)):
        module = "ctxbench." + ".".join(f.relative_to(PACKAGE).with_suffix("").parts)
        for key, default, line, scope in literal_defaults(f):
            builder = builders.get(f"{module}:{scope}")
            if key in FRAMEWORK_KEYS or (builder is not None and builder is not obj):
                continue
            value = OmegaConf.select(cfg, key, default="<absent>")
            if isinstance(value, str) and value == "<absent>":
                continue
            value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            if not same(default, value):
                wrong.append(f"{f.name}:{line} {key}: code default {default!r}, {kind}/{option}.yaml {value!r}")
    assert not wrong, "code and YAML defaults differ:\n" + "\n".join(wrong)


def test_the_rule_sees_the_lococo_defaults():
    """The parser finds the literals the rule compares (so an empty result is not a pass by accident)."""
    found = {k: v for k, v, _, _ in literal_defaults(PACKAGE / "methods" / "lococo.py")}
    kv = {k: v for k, v, _, _ in literal_defaults(PACKAGE / "methods" / "kv_cache.py")}
    assert found["local_len"] == 32 and found["kernel_size"] == 21 and kv["segment_len"] == 64
    assert "positions" not in kv  # H2O and StreamingLLM disagree: every YAML sets it, the code has no default
    files = {p.name for p in source_files(registry.get("method", "lococo"))}
    assert {"lococo.py", "kv_cache.py"} <= files


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
    dead = [k for k, _ in yaml_leaves(cfg) if k.split(".")[-1] not in words]
    assert not dead, f"{kind}/{option}.yaml: keys no code reads: {dead}"


def test_framework_keys_are_read_by_the_package():
    words = words_in(PACKAGE.rglob("*.py"))
    assert FRAMEWORK_KEYS <= words


def test_the_dead_key_check_would_catch_max_length():
    """model.max_length was in every model YAML and read by nothing: the check names such a key."""
    words = words_in(source_files(registry.get("model", "tiny")))
    assert "max_length" not in words and "attn_implementation" in words
