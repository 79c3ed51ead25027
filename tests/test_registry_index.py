"""The registry answers names from the source (ctxbench/core/registry_index.py): what it reads must be
exactly what importing every module registers, and ``get`` imports only the module that registers a name."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.core import registry, registry_index

REPO = Path(__file__).resolve().parents[1]


def test_index_equals_what_importing_everything_registers():
    registry.discover()
    index = registry_index.entries(registry.PACKAGES)
    alias_index = registry_index.aliases(registry.PACKAGES)
    for kind in registry.KINDS:
        registered = {n: m for n, m in registry._ORIGIN[kind].items() if m.startswith("ctxbench.")}
        assert registered == index[kind], kind
        assert {a: n for a, n in registry._ALIASES[kind].items() if n in registered} == alias_index[kind], kind


def test_reads_the_forms_a_module_registers_with():
    src = '''
@register("method", "a", aliases=("x", "y"))
class A: ...
register("method", "b")(A)
J = register("judge", "c")(object())
"""``@register("task", NAME)`` in a docstring names no entry"""
other.register("method", "not_ours")
'''
    assert registry_index.registrations(src) == [("method", "a", ("x", "y")), ("method", "b", ()),
                                                  ("judge", "c", ())]


def test_get_imports_only_the_registering_module():
    code = ("import sys; from ctxbench.core import registry; registry.get('format', 'mem0'); "
            "print(sorted(m for m in sys.modules if m.startswith('ctxbench.methods') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_unknown_name_suggests_without_importing():
    with pytest.raises(registry.UnknownName, match="Did you mean 'icae_pretrain'"):
        registry.get("method", "icae_pretrian")
    with pytest.raises(registry.UnknownName, match="unknown registry kind"):
        registry.names("methd")


def test_a_name_registered_at_run_time_is_found():
    class Sentinel:  # a metric: checked against the metric contract when it registers
        name, version, reference = "test_registry_index_runtime", "1", "a test"

        def score(self, prediction, question):
            return None

    sentinel = Sentinel
    registry.register("metric", "test_registry_index_runtime")(sentinel)
    try:
        assert registry.get("metric", "test_registry_index_runtime") is sentinel
        assert "test_registry_index_runtime" in registry.names("metric")
    finally:
        registry._REGISTRY["metric"].pop("test_registry_index_runtime")
        registry._ORIGIN["metric"].pop("test_registry_index_runtime")


def test_a_metric_that_breaks_the_contract_is_refused_when_it_registers():
    from ctxbench.core.system import ContractError

    with pytest.raises(ContractError, match="has no version"):
        registry.register("metric", "test_registry_index_noversion")(type("NoVersion", (), {"name": "x", "score": len}))
    assert "test_registry_index_noversion" not in registry._REGISTRY["metric"]
