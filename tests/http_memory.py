"""The reference memory server of docs/examples/http_memory_server.py (``memory=http``'s protocol) for tests.

Imported from its file (it imports nothing of ctxbench), served in a thread of this process (:func:`serve`; one
shared server, :func:`reference_url`, for the tests that run every registered memory system: :func:`with_remote`
points ``memory=http``'s config at it) or run as a real process (:func:`spawn`).
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "http_memory_server.py"
_module: Any = None
_shared: str | None = None


def reference() -> Any:
    """The reference server's module, loaded from its file once."""
    global _module
    if _module is None:
        spec = importlib.util.spec_from_file_location("http_memory_server", REFERENCE)
        _module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_module)
    return _module


def serve(handler: Any = None, state: str | None = None) -> tuple[Any, str]:
    """(server, its url): the reference server (with ``handler``, a subclass of its Handler) in a thread."""
    ref = reference()
    server = ref.make_server("127.0.0.1", 0, state, handler or ref.Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def stop(server: Any) -> None:
    server.shutdown()
    server.server_close()


def reference_url() -> str:
    """One reference server for this test process (histories of different tests are reset or truncated by the
    client as it finds them: the protocol's resume rule)."""
    global _shared
    if _shared is None:
        _shared = serve()[1]
    return _shared


def with_remote(name: str, cfg: Any) -> Any:
    """``cfg`` with ``memory.url`` at the shared reference server when it is ``memory=http``'s."""
    if name == "http":
        cfg.url = reference_url()
    return cfg


def spawn(*args: str, script: Path = REFERENCE) -> tuple[subprocess.Popen, str]:
    """(process, url): ``script`` (the reference server, or a test's variant of it) as a process of its own on a
    free port unless ``args`` name one; the url is read from its first line."""
    proc = subprocess.Popen([sys.executable, str(script), *(args if "--port" in args else ("--port", "0", *args))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"{script.name} did not start: {line!r} {proc.stderr.read()}")
    return proc, line.removeprefix("listening on ")
