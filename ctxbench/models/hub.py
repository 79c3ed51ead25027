"""Before a hub id that is not cached is downloaded: is the hub reachable at all?

Without this, a model asked for offline (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set, or no
network) spends ~50 s in huggingface_hub's retries before transformers gives up. The check runs
only for a hub id that is missing from the local Hugging Face cache: a cached model loads as before.
"""
from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TIMEOUT_S = 1.0


def offline_var() -> str | None:
    """The offline variable that is set to a true value (1/ON/YES/TRUE), if any."""
    for var in OFFLINE_VARS:
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return var
    return None


def is_cached(repo_id: str) -> bool:
    """True when the local Hugging Face cache holds ``repo_id``'s config.json."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a malformed id: let transformers name the problem
        return True


def endpoint() -> str:
    """The hub address huggingface_hub uses (``HF_ENDPOINT``, default https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def reachable(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` seconds (DNS included)."""
    parts = urlparse(url)
    host = parts.hostname
    if not host:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=attempt, daemon=True)  # a thread, so a slow DNS lookup cannot stall us
    t.start()
    t.join(timeout)
    return bool(result and result[0])


def unreachable_reason(repo_id: str) -> str | None:
    """Why ``repo_id`` cannot be downloaded now (offline mode or no network), or None to go ahead."""
    if is_cached(repo_id):
        return None
    var = offline_var()
    if var:
        return f"it is not in the local Hugging Face cache and {var} is set (offline mode)"
    url = endpoint()
    if not reachable(url):
        host = urlparse(url).netloc or url
        return f"it is not in the local Hugging Face cache and {host} cannot be reached (no network?)"
    return None
