"""Hugging Face hub access for datasets (PwC, Pile): only when the user is online.

Tests and CI set HF_DATASETS_OFFLINE=1 / HF_HUB_OFFLINE=1; then every hub path fails at once with a
one-line DataError instead of a long retry.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

from ctxbench.data.errors import DataError

_TRUE = ("1", "true", "yes", "on")


def hub_offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def require_online(hub_id: str, name: str) -> None:
    if hub_offline():
        raise DataError(hub_id, f"is a hub dataset but the hub is offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE "
                                f"set): unset them on a machine with network (`python -m ctxbench data download "
                                f"{name}` saves a local copy), or set dataset.path to a local JSONL file")


def iter_hub_rows(hub_id: str, split: str, name: str, streaming: bool = True,
                  config: str | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a hub dataset (streamed by default, so the Pile never lands on disk whole).

    Checks (offline, package, split) happen at the call, not at the first row."""
    require_online(hub_id, name)
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core dependency
        raise DataError(hub_id, "needs the `datasets` package (pip install datasets)") from None
    try:
        ds = datasets.load_dataset(hub_id, config, split=split, streaming=streaming)
    except Exception as e:  # network, auth, missing split: one line for the user
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(hub_id, f"cannot load split {split!r} from the hub: {msg}") from None
    return iter(ds)
