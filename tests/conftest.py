"""Shared test setup: offline, no wandb, a per-session model cache, paths to the shared real data."""
from __future__ import annotations

import logging
import logging.config
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
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # workers share the cores: one thread each (before torch loads)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

REPO = Path(__file__).resolve().parents[1]
# eval on llm.model=tiny (random weights) gets empty replies, which health counts as failed calls (issue 37):
# the runs that test plumbing on it, not answers, let them pass
TINY_ANSWERS = "max_failed_fraction=1"


def _forget_handlers_without_closing() -> None:
    """In place of logging.config's ``_clearExistingHandlers``: Hydra configures logging with dictConfig on
    every in-process run, which closes every handler logging knows, pytest's capture handlers among them
    and absl's (whose close() closes the stream it was made over, pytest's captured stderr). Forget them;
    close nothing."""
    logging._handlers.clear()
    del logging._handlerList[:]


logging.config._clearExistingHandlers = _forget_handlers_without_closing

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


def run_cli(*args: str, cwd: Path = REPO, timeout: int = 600, env: dict | None = None,
            spawn: bool = False) -> subprocess.CompletedProcess:
    """``python -m ctxbench ...`` as a user would; returns the completed process.

    In-process by default (``ctxbench.__main__.main(args)`` with argv, cwd, environment and stdout/stderr
    swapped for the call): the same entry point and exit codes without a fresh interpreter importing torch
    each time (~8 s on 2 cores). ``spawn=True`` runs a real subprocess: for what only a process shows (the
    import-time environment, signals, a timeout, what a fresh interpreter imports). ``CTXBENCH_TEST_SPAWN=1``
    spawns every call.
    """
    if spawn or os.environ.get("CTXBENCH_TEST_SPAWN") == "1":
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([sys.executable, "-m", "ctxbench", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=full_env)
    return _run_in_process(list(args), cwd, env or {})


def _run_in_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import traceback

    from ctxbench import __main__ as entry

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv[:]
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    code = 0
    os.environ.update({k: str(v) for k, v in env.items()})
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                entry.main(args)
            except SystemExit as e:
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except KeyboardInterrupt:
                raise
            except BaseException:  # a subprocess would print the traceback and exit 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv[:] = saved_argv
        _reset_process_state(root, saved_handlers, saved_level)
    return subprocess.CompletedProcess([sys.executable, "-m", "ctxbench", *args], code, out.getvalue(), err.getvalue())


def _reset_process_state(root, handlers: list, level: int) -> None:
    """What one CLI call leaves in the process: Hydra's logging handlers and singletons, accelerate's state."""
    for h in root.handlers[:]:
        if h not in handlers:
            root.removeHandler(h)
            if isinstance(h, logging.FileHandler):  # the run's log file; a stream handler's stream is not ours
                h.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None
    if "accelerate" in sys.modules:
        from accelerate.state import AcceleratorState, GradientState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        PartialState._reset_state()


@pytest.fixture
def cli():
    return run_cli
