"""Distributions as pip leaves them installed, for tests of plug-ins by entry point.

A package folder on ``sys.path`` and, beside it, ``<dist>-<version>.dist-info`` with ``METADATA`` and
``entry_points.txt``: importlib.metadata finds these as it finds any installed distribution.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "examples" / "lastturns"  # docs/plugins.md's example package


def dist_info(root: Path, dist: str, version: str, entry_points: dict[str, dict[str, str]]) -> Path:
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()))
    return root


def make_dist(root: Path, dist: str, version: str, package: str, source: str,
              entry_points: dict[str, dict[str, str]]) -> Path:
    """``root`` holding ``package`` (its ``__init__.py`` is ``source``) installed as ``dist`` ``version``."""
    (root / package).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text(textwrap.dedent(source))
    return dist_info(root, dist, version, entry_points)


def example_installed(root: Path) -> list[str]:
    """The paths that make docs/examples/lastturns installed (as ``pip install -e`` would): put them on sys.path."""
    dist_info(root, "lastturns-pkg", "0.2.0", {"ctxbench.memory": {"lastturns": "lastturns_pkg:LastTurns"}})
    return [str(root), str(EXAMPLE)]
