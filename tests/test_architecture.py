"""The floor plan cannot rot: the import layers in pyproject.toml hold, and the top level stays small."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ctxbench"


def test_import_layers_hold():
    """``lint-imports`` (import-linter, contracts in pyproject.toml): no layer imports one above it, so no cycles."""
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout


def test_top_level_names_the_wings():
    """Besides its subpackages, the package root holds only its entry points — the CLI and the public API a plug-in
    imports (docs/plugins.md) — and the config and sample folders."""
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert loose == ["__init__.py", "__main__.py", "api.py"], loose
    wings = {"core", "config", "training", "evaluation", "runs"}
    assert wings <= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
