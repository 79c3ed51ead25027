"""Shared test setup: offline, no wandb, a per-session model cache, paths to the shared real data."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]

from ctxbench.config.schemas import register  # noqa: E402

register()  # the config schemas into Hydra's ConfigStore: tests compose conf/ directly
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def run_cli(*args: str, cwd: Path = REPO, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m ctxbench ...`` as a user would; returns the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "ctxbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture
def cli():
    return run_cli
