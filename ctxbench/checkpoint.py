"""Checkpoints: only what was trained, written atomically, verified on load.

A checkpoint is a folder ``checkpoints/step_<N>/`` holding

- ``trainable.safetensors`` — the method's trainable weights (LoRA, memory embeddings, compressor);
- ``method.json`` — the method config needed to rebuild it on the base model;
- ``optimizer.pt`` / ``scheduler.pt`` — loaded with ``weights_only=True``;
- ``state.json`` — step, data position, RNG states;
- ``MANIFEST.json`` — size and sha256 of every file, written last.

It is written to ``step_<N>.tmp`` and renamed into place, so a crash mid-write leaves no folder
that looks complete; a folder whose files do not match its manifest is refused with a message.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

MANIFEST = "MANIFEST.json"
WEIGHTS = "trainable.safetensors"


class CheckpointError(RuntimeError):
    pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


from .results import atomic_write_text  # noqa: E402,F401 - re-exported for the loop


def rng_state() -> dict[str, Any]:
    import numpy as np

    np_state = np.random.get_state()
    return {
        "python": repr(random.getstate()),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    import ast

    import numpy as np

    random.setstate(ast.literal_eval(state["python"]))
    n = state["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def save_checkpoint(ckpt_root: Path, step: int, *, trainable: dict[str, torch.Tensor],
                    method_config: dict[str, Any], optimizer: Any = None, scheduler: Any = None,
                    state: dict[str, Any] | None = None, keep: int = 0) -> Path:
    from safetensors.torch import save_file

    ckpt_root = Path(ckpt_root)
    final = ckpt_root / f"step_{step:07d}"
    tmp = ckpt_root / f"step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in trainable.items()}, str(tmp / WEIGHTS))
    (tmp / "method.json").write_text(json.dumps(method_config, indent=2, default=str))
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if scheduler is not None:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **(state or {})}))
    files = sorted(p for p in tmp.iterdir() if p.name != MANIFEST)
    manifest = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    for p in tmp.iterdir():  # make the bytes durable before the rename publishes them
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    if keep and keep > 0:
        for old in list_checkpoints(ckpt_root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return []
    found = [p for p in ckpt_root.iterdir() if p.is_dir() and p.name.startswith("step_")
             and not p.name.endswith(".tmp") and (p / MANIFEST).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, a run folder (its latest checkpoint) or a checkpoints/ folder."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist")
    if (p / MANIFEST).exists() or (p / WEIGHTS).exists():
        return p
    for root in (p / "checkpoints", p):
        found = list_checkpoints(root)
        if found:
            return found[-1]
    raise CheckpointError(f"no complete checkpoint under {str(p)!r} (looked for checkpoints/step_*/{MANIFEST})")


def verify(ckpt: Path) -> dict[str, Any]:
    mpath = ckpt / MANIFEST
    if not mpath.exists():
        raise CheckpointError(f"checkpoint {ckpt} has no {MANIFEST}: it was not written completely")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"checkpoint {ckpt}: {MANIFEST} is corrupt") from None
    for name, meta in manifest.items():
        f = ckpt / name
        if not f.exists():
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is missing")
        if f.stat().st_size != meta["bytes"]:
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is truncated "
                                  f"({f.stat().st_size} of {meta['bytes']} bytes)")
        if _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is corrupt (sha256 mismatch)")
    return manifest


def load_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if (ckpt / MANIFEST).exists():
        verify(ckpt)
    try:
        return load_file(str(ckpt / WEIGHTS))
    except Exception as e:  # safetensors raises its own error types
        raise CheckpointError(f"checkpoint {ckpt}: cannot read {WEIGHTS}: {e}") from None


def load_trained(method: Any, path: str | Path) -> Path:
    """Load a run's (latest) trained weights onto a built method; returns the checkpoint used."""
    ckpt = resolve_checkpoint(path)
    method.load_trainable(load_weights(ckpt))
    return ckpt


def load_training_state(ckpt: Path, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    verify(ckpt)
    if optimizer is not None and (ckpt / "optimizer.pt").exists():
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    if scheduler is not None and (ckpt / "scheduler.pt").exists():
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
    return json.loads((ckpt / "state.json").read_text())
