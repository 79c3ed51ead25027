"""Where data lives: the shipped samples (package data, ``data/samples/...`` in configs) and downloads
(``data/downloads`` of the source checkout; ``$CTXBENCH_CACHE/data/downloads`` for an installed copy)."""
from __future__ import annotations

import os
from pathlib import Path

from ctxbench.core.paths import cache_root, samples_dir, source_root
from ctxbench.data.errors import DataError

SAMPLES_PREFIX = ("data", "samples")  # how configs name a shipped sample: data/samples/<file>


def data_root() -> Path:
    """``$CTXBENCH_DATA``, else the checkout's ``data/``, else ``data/`` in the ctxbench cache."""
    if os.environ.get("CTXBENCH_DATA"):
        return Path(os.environ["CTXBENCH_DATA"])
    root = source_root()
    if root is not None:
        return root / "data"
    return cache_root() / "data"


def candidates(path: str | os.PathLike) -> list[Path]:
    """Where a user path may be: as given (absolute or cwd-relative), in the source checkout, and for
    ``data/samples/<file>`` the copy shipped inside the package."""
    p = Path(os.path.expanduser(str(path)))
    out = [p]
    root = source_root()
    if root is not None and not p.is_absolute():
        out.append(root / p)
    if not p.is_absolute() and p.parts[:2] == SAMPLES_PREFIX:
        out.append(samples_dir().joinpath(*p.parts[2:]))
    return out


def resolve(path: str | os.PathLike, what: str = "dataset.path", hint: str | None = None) -> Path:
    """Resolve a user path (absolute, relative to cwd, to the repo, or a shipped sample) or fail clearly."""
    p = Path(os.path.expanduser(str(path)))
    for cand in candidates(p):
        if cand.exists():
            if cand.is_file() and not os.access(cand, os.R_OK):
                raise DataError(cand, "file is not readable")
            return cand
    raise DataError(p, f"not found; {hint}" if hint else
                    f"{what} does not exist (download it with `python -m ctxbench data download NAME`"
                    " or point dataset.path at a local copy)")
