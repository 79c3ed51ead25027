"""Operating-system faults a user's machine gives the CLI (issue 37): a device or a FIFO as a data file,
``CTXBENCH_CACHE`` naming a file, a run folder below a file or in a read-only folder.

Each is refused in one ``ctxbench: error:`` line naming the path. A full disk cannot be a CLI case (the
sweep has no disk to fill): tests/test_os_faults.py fills one in-process and under ``RLIMIT_FSIZE``.
"""
from __future__ import annotations

import os
from pathlib import Path

from bad_input.cases import Case, eval_locomo, eval_on


def _fifo(work: Path, ctx: dict) -> None:
    os.mkfifo(work / "fifo")


def _read_only(work: Path, ctx: dict) -> None:
    """``{work}/ro``, a folder nobody may write; root ignores permissions, so the case skips as root."""
    if os.geteuid() == 0:
        import pytest

        pytest.skip("root writes in a read-only folder (permissions do not bind it): run the sweep as a user; "
                    "tests/test_os_faults.py checks it with the capability dropped")
    (work / "ro").mkdir()
    (work / "ro" / "keep").write_text("x")
    (work / "ro").chmod(0o555)


def cases() -> list[Case]:
    run_at = [a for a in eval_locomo() if not a.startswith("hydra.run.dir=")]
    return [
        Case("faults.dataset_path_dev_zero", "faults", "dataset.path=/dev/zero (an endless device of size 0)",
             eval_on("locomo", "/dev/zero"), expect=("/dev/zero",), mem_bound_mb=2048, timeout=60),
        Case("faults.dataset_path_dev_urandom", "faults", "dataset.path=/dev/urandom (pwc, streamed JSONL)",
             eval_on("pwc", "/dev/urandom"), expect=("/dev/urandom",), mem_bound_mb=2048, timeout=60),
        Case("faults.dataset_path_fifo", "faults", "dataset.path= a FIFO nobody writes to (would block forever)",
             eval_on("locomo", "{work}/fifo"), _fifo, expect=("{work}/fifo",), timeout=60),
        Case("faults.predictions_fifo", "faults", "score predictions= a FIFO",
             ["score", "predictions={work}/fifo", "progress=false", "hydra.run.dir={work}/run"], _fifo,
             expect=("{work}/fifo",), timeout=60),
        Case("faults.cache_env_is_file", "faults", "CTXBENCH_CACHE=/dev/null (a file, not a folder)", eval_locomo(),
             expect=("CTXBENCH_CACHE",), env={"CTXBENCH_CACHE": "/dev/null"}),
        Case("faults.cache_env_below_file", "faults", "CTXBENCH_CACHE=/dev/null/cache (a folder below a file)",
             eval_locomo(), expect=("CTXBENCH_CACHE",), env={"CTXBENCH_CACHE": "/dev/null/cache"}),
        Case("faults.run_dir_below_file", "faults", "hydra.run.dir= a folder below an existing file",
             run_at + ["hydra.run.dir={work}/afile/run"], lambda work, ctx: (work / "afile").write_text("x"),
             expect=("afile",)),
        Case("faults.run_dir_read_only", "faults", "hydra.run.dir= inside a read-only folder",
             run_at + ["hydra.run.dir={work}/ro/run"], _read_only, expect=("{work}/ro",)),
        Case("faults.os_control", "faults", "the base eval with a writable cache and run folder (control)",
             eval_locomo(), control=True),
    ]
