"""The conformance checks of ``python -m ctxbench check`` from an author's own tests (pytest).

In a test file (or ``conftest.py``)::

    pytest_plugins = ["ctxbench.check.pytest_plugin"]

    def test_my_memory_passes_the_ctxbench_checks(ctxbench_check):
        ctxbench_check("memory", "lastturns")            # the entry point's name, or the class itself

    # or, without the fixture:
    from ctxbench.check.pytest_plugin import check_system
    check_system("memory", LastTurns, settings={"n_turns": 3}, out=tmp_path)

A failing check fails the test with the whole table (each check, pass / fail / skip and why).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxbench.check import check
from ctxbench.check.result import FAIL, CheckResult, table


def check_system(kind: str, name: Any, **kw: Any) -> list[CheckResult]:
    """Run :func:`ctxbench.check.check` (same arguments) and fail the calling test when a check fails."""
    results = check(kind, name, **kw)
    label = f"{kind}={name if isinstance(name, str) else getattr(name, '__name__', name)}"
    if any(r.status == FAIL for r in results):
        pytest.fail(table(label, results), pytrace=False)
    return results


@pytest.fixture
def ctxbench_check(tmp_path: Path) -> Any:
    """``ctxbench_check(kind, name, **kw)``: :func:`check_system` with its runs in the test's ``tmp_path``."""

    def run(kind: str, name: Any, **kw: Any) -> list[CheckResult]:
        kw.setdefault("out", tmp_path / "ctxbench-check")
        return check_system(kind, name, **kw)

    return run
