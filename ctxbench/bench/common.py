"""Shared pieces of the benchmark suites: machine info, statistics, memory probes, config composition.

Memory is measured as *resident set size* (RSS) read from the kernel, never with ``tracemalloc``
(which does not see torch's C++ allocations): :func:`reset_peak` clears the process's high-water
mark (``/proc/self/clear_refs``, Linux) and :func:`peak_rss` reads it back (``VmHWM``), falling back
to ``getrusage(RUSAGE_SELF).ru_maxrss`` (a lifetime peak) where the reset is not possible.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ctxbench.core.paths import conf_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = conf_dir()
MB = 1024 * 1024


class Skip(Exception):
    """Raised by a suite (or one row of it) that cannot run here; the reason goes into bench.json."""


# ---- machine ---------------------------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
    import torch

    from ctxbench.runs.results import git_info

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count()
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    return {"cpu_count": os.cpu_count(), "cpus_usable": affinity, "cpu_model": _cpu_model(),
            "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
            "cuda": torch.cuda.is_available(), "python": platform.python_version(), "platform": platform.platform(),
            "mem_total_bytes": mem_total, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "git": git_info(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover
        pass
    return platform.processor()


# ---- statistics ------------------------------------------------------------------------------------

def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation; None for no values."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo, frac = int(pos), pos - int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def median(values: Iterable[float]) -> float | None:
    xs = list(values)
    return statistics.median(xs) if xs else None


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# ---- memory ----------------------------------------------------------------------------------------

def reset_peak() -> bool:
    """Reset this process's peak-RSS mark (Linux ≥ 4.0); False when the kernel does not allow it."""
    from ctxbench.methods.kv_cache import reset_peak_rss

    return reset_peak_rss()


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss() -> int:
    """Current resident memory of this process in bytes."""
    v = _status_kb("VmRSS")
    if v is not None:
        return v
    import resource  # pragma: no cover

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # pragma: no cover


def peak_rss() -> int:
    """Peak resident memory since the last :func:`reset_peak` (VmHWM), else the lifetime ru_maxrss."""
    v = _status_kb("VmHWM")
    if v is not None:
        return v
    import resource  # pragma: no cover

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # pragma: no cover


def trim_heap() -> None:
    """Give freed heap pages back to the kernel (glibc ``malloc_trim``), so RSS shows live memory only."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class PeakMemory:
    """``with PeakMemory() as m: work()`` → ``m.base`` (RSS before), ``m.peak`` (peak during), ``m.delta``.

    ``m.exact`` is False where the peak mark could not be reset (then the peak is the process's
    lifetime maximum and ``delta`` is a lower bound of what the work added).
    """

    def __enter__(self) -> "PeakMemory":
        import gc

        gc.collect()
        trim_heap()
        self.base = rss()
        self.exact = reset_peak()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.peak = max(peak_rss(), self.base)
        self.delta = self.peak - self.base


# ---- configs ---------------------------------------------------------------------------------------

def compose(config_name: str, overrides: list[str]) -> Any:
    """Compose ``conf/<config_name>.yaml`` with ``overrides`` (inside a running Hydra app or not)."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ctxbench.config.schemas import register

    register()  # the schemas' defaults (a worker process composes without the CLI)
    if GlobalHydra.instance().is_initialized():
        return hcompose(config_name=config_name, overrides=list(overrides))
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="bench"):
        return hcompose(config_name=config_name, overrides=list(overrides))


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def registered(kind: str) -> list[str]:
    from ctxbench.core.registry import names

    return names(kind)


def is_registered(kind: str, name: str) -> bool:
    from ctxbench.core.registry import UnknownName, get

    try:
        get(kind, name)
        return True
    except UnknownName:
        return False


def dir_bytes(path: str | Path) -> int:
    """Total size of the files under ``path`` (what a store occupies on disk)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def rnd(v: Any, nd: int = 4) -> Any:
    return round(v, nd) if isinstance(v, float) else v
