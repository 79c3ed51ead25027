"""A Python that has only what the GPU machine has (issue 42): this venv's interpreter started with
``-S`` (no site-packages) and a folder of links to the installed files of torch, transformers, peft
and accelerate and everything they require (the GPU machine's Python also has sentence-transformers,
left out here: the check must not need it, nor its scipy / scikit-learn), plus ``travel`` (the
distributions that travel as wheels, hydra-core and omegaconf, when a test keeps them visible).

Anything else the check imported (datasets, deepspeed, xgrammar, faiss, wandb, rouge_score, nltk,
scipy, jsonschema, ...) is simply not installed there: ``find_spec`` answers None and an import
fails with ModuleNotFoundError, as on the GPU machine.
"""
from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

DEVICE_HAS = ("torch", "transformers", "peft", "accelerate")
TRAVEL = ("hydra-core", "omegaconf", "antlr4-python3-runtime")


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: tuple[str, ...]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` require, transitively (no extras)."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    stack = list(roots)
    while stack:
        name = canon(stack.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                stack.append(r.name)
    return seen


def device_site(folder: Path, travel: bool = True) -> Path:
    """``folder`` filled with links to the top-level entries of the device's distributions."""
    folder.mkdir(parents=True, exist_ok=True)
    dists = closure(DEVICE_HAS + (TRAVEL if travel else ()))
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        for f in dist.files or []:
            top = Path(f).parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            link, target = folder / top, base / top
            if not link.exists() and target.exists():
                link.symlink_to(target)
    return folder


def device_python(tmp: Path, travel: bool = True) -> tuple[Path, dict[str, str]]:
    """(an executable that runs the device-like Python, the environment it needs)."""
    site = device_site(tmp / "site", travel)
    exe = tmp / "python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    exe.chmod(0o755)
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PYTHONPATH=f"{repo}{os.pathsep}{site}", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    return exe, env
