"""Where data lives: the shipped samples (data/samples) and downloads (data/downloads)."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]


def data_root() -> Path:
    return Path(os.environ.get("CTXBENCH_DATA", REPO_ROOT / "data"))


def samples_dir() -> Path:
    return REPO_ROOT / "data" / "samples"


def resolve(path: str | os.PathLike, what: str = "dataset.path", hint: str | None = None) -> Path:
    """Resolve a user path (absolute, relative to cwd, or relative to the repo) or fail clearly."""
    p = Path(os.path.expanduser(str(path)))
    for cand in (p, REPO_ROOT / p):
        if cand.exists():
            if cand.is_file() and not os.access(cand, os.R_OK):
                raise DataError(cand, "file is not readable")
            return cand
    raise DataError(p, f"not found; {hint}" if hint else
                    f"{what} does not exist (download it with `python -m ctxbench data download NAME`"
                    " or point dataset.path at a local copy)")
