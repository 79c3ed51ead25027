"""Operating-system faults end in one line naming the path (issue 37): a full disk while a run file, a
checkpoint or a cache is written (nothing half-written is left, the next run resumes), a read-only run
folder, ``CTXBENCH_CACHE`` naming a file, a device or FIFO given as a data file."""
from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from ctxbench.core.errors import ConfigError
from ctxbench.core.write_faults import WriteFault, write_fault
from ctxbench.data.errors import DataError


class FullAfter:
    """A file whose ``write`` takes its first ``n_ok`` bytes, then fails as a full disk does (ENOSPC)."""

    def __init__(self, f, n_ok: int):
        self.f, self.left = f, n_ok

    def write(self, b):
        if self.left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.f.write(memoryview(b)[:self.left])
        self.left -= n
        return n

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_a_full_disk_mid_line_cuts_predictions_back_and_a_rerun_appends(tmp_path):
    from ctxbench.evaluation.resume import read_predictions
    from ctxbench.runs.results import JsonlAppender

    p = tmp_path / "predictions.jsonl"
    with JsonlAppender(p) as out:
        out.append({"id": "q1", "prediction": "a"})
    whole = p.read_bytes()
    with pytest.raises(WriteFault) as e, JsonlAppender(p) as out:
        out._f = FullAfter(out._f, 5)
        out.append({"id": "q2", "prediction": "b" * 100})
    assert str(e.value) == f"{p}: cannot write (no space left on the device); free space or fix the permissions, " \
                           "then rerun: the run resumes from what was saved"
    assert p.read_bytes() == whole  # no torn line left behind
    with JsonlAppender(p) as out:  # space again: the rerun appends after the last whole line
        out.append({"id": "q2", "prediction": "b"})
    assert list(read_predictions(p)) == ["q1", "q2"]


def test_a_full_disk_in_an_atomic_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    from ctxbench.runs.results import write_json

    p = tmp_path / "results.json"
    write_json(p, {"old": 1})

    def fsync(fd):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(WriteFault, match=r"results\.json: cannot write \(disk quota exceeded\)"):
        write_json(p, {"new": 2})
    assert sorted(f.name for f in tmp_path.iterdir()) == ["results.json"] and '"old"' in p.read_text()


def test_a_full_disk_while_a_checkpoint_is_written_leaves_no_folder_and_resume_ignores_it(tmp_path, monkeypatch):
    import torch

    from ctxbench.training import checkpoint as ck

    kw = dict(trainable={"w": torch.zeros(2)}, method_config={"name": "lm"})
    ck.save_checkpoint(tmp_path, 2, **kw)

    def save(*a, **k):  # torch's zip writer: a RuntimeError chained to the OSError
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0") from e
    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(WriteFault, match=r"step_0000004: cannot write \(no space left on the device\)"):
        ck.save_checkpoint(tmp_path, 4, optimizer=torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1), **kw)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["step_0000002"]
    assert ck.latest_complete(tmp_path) == tmp_path / "step_0000002"


@pytest.mark.parametrize("text, cause", [
    ("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })",
     "no space left on the device"),
    ("unexpected pos 64 vs 0", "the write was cut short"),
])
def test_library_messages_of_a_full_disk(text, cause):
    assert cause in str(write_fault(RuntimeError(text), "x"))
    assert write_fault(ValueError("a bug"), "x") is None


def test_a_full_disk_in_the_call_cache_and_a_memory_store_is_one_line(tmp_path):
    from ctxbench.core.write_faults import FaultMappedConnection
    from ctxbench.llm.base import ChatResult
    from ctxbench.llm.cache import CallCache

    cache = CallCache(tmp_path / "c.sqlite")
    conn = cache._conn()
    conn.execute("PRAGMA max_page_count=" + str(conn.execute("PRAGMA page_count").fetchone()[0]))
    with pytest.raises(WriteFault, match=r"c\.sqlite: cannot write \(no space left on the device\)"):
        cache.put("k", ChatResult(text="x" * 100_000, prompt_tokens=1, completion_tokens=1))
    db = sqlite3.connect(tmp_path / "s.sqlite", factory=FaultMappedConnection)
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count=" + str(db.execute("PRAGMA page_count").fetchone()[0]))
    with pytest.raises(WriteFault, match=r"s\.sqlite: cannot write"), db:
        db.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))


def test_a_file_size_limit_in_a_real_process_is_one_line(tmp_path):
    """RLIMIT_FSIZE with SIGXFSZ ignored: the kernel refuses the write (EFBIG), as a full disk would."""
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "from ctxbench.runs.results import JsonlAppender; from ctxbench.core.errors import CtxbenchError\n"
            "try:\n with JsonlAppender(sys.argv[1]) as o:\n  [o.append({'i': i, 'x': 'y' * 100}) for i in range(100)]\n"
            "except CtxbenchError as e:\n print(e)")
    p = tmp_path / "samples.jsonl"
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.stdout.strip().startswith(f"{p}: cannot write (file too large"), r.stdout + r.stderr
    assert p.read_bytes().endswith(b"\n")  # whole lines only


def test_ctxbench_cache_naming_a_file_or_below_one(tmp_path, monkeypatch):
    from ctxbench.llm.cache import default_cache_path

    f = tmp_path / "afile"
    f.write_text("x")
    for value in (f, f / "sub"):
        monkeypatch.setenv("CTXBENCH_CACHE", str(value))
        with pytest.raises(ConfigError) as e:
            default_cache_path()
        assert str(e.value).startswith(f"CTXBENCH_CACHE={value}: {f} is a file, not a folder")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "new"))
    assert default_cache_path() == tmp_path / "new" / "llm_cache.sqlite"


def _unprivileged() -> list[str]:
    """A command prefix under which permissions bind: root without CAP_DAC_OVERRIDE (setpriv), else nothing."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root (permissions do not bind it) and setpriv is missing to drop the capability")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


@pytest.mark.parametrize("where", ["new", "existing", "log"])
def test_a_read_only_run_folder_is_one_line_before_hydra(tmp_path, where):
    ro = tmp_path / "ro"
    (ro / "run" / ".hydra").mkdir(parents=True)
    (ro / "run" / "score.log").write_text("")
    run = ro / ("new" if where == "new" else "run")
    if where == "log":
        (ro / "run" / "score.log").chmod(0o444)
    else:
        (ro / "run").chmod(0o555)
        ro.chmod(0o555)
    try:
        r = subprocess.run([*_unprivileged(), sys.executable, "-m", "ctxbench", "score", "predictions=x.jsonl",
                            f"hydra.run.dir={run}"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        ro.chmod(0o755), (ro / "run").chmod(0o755)
    bad = {"new": ro, "existing": ro / "run", "log": ro / "run" / "score.log"}[where]
    assert r.returncode == 2 and r.stderr.strip() == (
        f"ctxbench: error: hydra.run.dir={run}: {bad} is not writable (permission denied) "
        "(a run folder is created there)"), r.stderr


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo"])
def test_a_device_or_fifo_is_refused_before_it_is_read(tmp_path, special):
    from ctxbench.data.records import iter_jsonl, read_json

    path = Path(special)
    if special == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # nobody writes: opening it must not block
    for read in (read_json, lambda p: list(iter_jsonl(p))):
        with pytest.raises(DataError, match="not a regular file"):
            read(path)


def test_the_read_itself_is_bounded(tmp_path):
    """A file that reports a small size may hold more by the time it is read: read at most limit + 1."""
    from ctxbench.data.bounds import read_bounded

    p = tmp_path / "grows.json"
    p.write_bytes(b"x" * 20)
    assert read_bounded(p, 20) == b"x" * 20
    with pytest.raises(DataError, match="over the 10-byte limit"):
        read_bounded(p, 10)
