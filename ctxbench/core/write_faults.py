"""Operating-system faults while writing a run file, as one line naming the path and the cause.

A full disk (``ENOSPC``), a spent quota (``EDQUOT``), a file over the size limit (``EFBIG``), a
read-only file system (``EROFS``) or a permission refused (``EACCES``/``EPERM``) can hit any write:
results.json, predictions.jsonl, a checkpoint (torch says ``unexpected pos``, safetensors names the
``Os { code: 28 }``), the LLM call cache or a memory store (SQLite says ``database or disk is full``
or ``attempt to write a readonly database``). :func:`write_fault` recognises all of them, whatever
library wrapped the ``OSError``; :func:`writing` turns one raised inside it into a
:class:`WriteFault` (the CLI prints it as one line, exit 2), after an optional ``cleanup`` that
removes what was half written, so the next run, with space or permissions fixed, resumes.
:class:`FaultMappedConnection` does the same for every statement of a SQLite store.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ctxbench.core.errors import CtxbenchError

CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for this file system or process limit",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file is in the way where a folder belongs",
    errno.EISDIR: "it is a folder, not a file",
}
# faults of the disk itself: any error of a command that carries one is reported as one line (:func:`disk_fault`)
DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
# what libraries print instead of raising the OSError: "[Errno 28] ...", Rust's "Os { code: 28, ... }"
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\]|\bOs \{ code: (\d+)")
_STRERROR = {os.strerror(n).lower(): n for n in CAUSES}
# SQLite's messages for the same faults (it does not keep the errno)
_SQLITE = {"database or disk is full": CAUSES[errno.ENOSPC],
           "attempt to write a readonly database": "read-only: its file or folder is not writable",
           "unable to open database file": "cannot open it: its folder is missing or not writable",
           "disk i/o error": "disk I/O error (is the disk full?)"}
# torch's zip writer reports a short write without the errno
_SHORT_WRITE = ("unexpected pos", "failed writing file")
REMEDY = "free space or fix the permissions, then rerun: the run resumes from what was saved"


class WriteFault(CtxbenchError, RuntimeError):
    """A run file could not be written for a reason of the machine (disk full, read-only, permission)."""

    def __init__(self, path: object, cause: str, remedy: str = REMEDY):
        super().__init__(f"{path}: cannot write ({cause}); {remedy}")
        self.path, self.cause = path, cause


def _cause(e: BaseException) -> str | None:
    """What the fault ``e`` itself says went wrong (not its chain), or None."""
    if isinstance(e, OSError) and e.errno in CAUSES:
        return CAUSES[e.errno]
    text = str(e)
    low = text.lower()
    if isinstance(e, sqlite3.Error):
        return next((cause for msg, cause in _SQLITE.items() if msg in low), None)
    m = _ERRNO_TEXT.search(text)
    if m and int(m.group(1) or m.group(2)) in CAUSES:
        return CAUSES[int(m.group(1) or m.group(2))]
    return next((CAUSES[n] for msg, n in _STRERROR.items() if msg in low), None)


def _disk_full(path: object) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing folder) has no block left."""
    p = Path(str(path)).absolute()
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        return os.statvfs(p).f_bavail == 0
    except OSError:
        return False


def write_fault(e: BaseException, path: object) -> WriteFault | None:
    """The one-line error for ``e`` (or an exception chained to it) raised while writing ``path``;
    None when it is not such a fault (a bug keeps its traceback)."""
    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for cur in chain:
        if isinstance(cur, WriteFault):
            return cur
        cause = _cause(cur)
        if cause is not None:
            return WriteFault(path, cause)
    short = next((c for c in chain if any(s in str(c) for s in _SHORT_WRITE)), None)
    if short is not None:
        return WriteFault(path, CAUSES[errno.ENOSPC] if _disk_full(path) else
                          f"the write was cut short: {str(short).splitlines()[0][:120]}")
    return None


@contextmanager
def writing(path: object, cleanup: Callable[[], Any] | None = None) -> Iterator[None]:
    """Writes to ``path`` inside: an OS fault becomes a :class:`WriteFault` naming it, after ``cleanup``
    (removing what was half written); any other error passes through untouched."""
    try:
        yield
    except Exception as e:
        _reraise(e, path, cleanup)


def names_write_faults(fn: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`writing` around ``fn(path, ...)``, or around a method ``fn(self, ...)`` whose object has
    ``self.path`` (read when the fault happens, so ``__init__`` may set it)."""
    @functools.wraps(fn)
    def wrapper(first: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(first, *args, **kwargs)
        except Exception as e:
            _reraise(e, first if isinstance(first, (str, os.PathLike)) else getattr(first, "path", first))
    return wrapper


def _reraise(e: Exception, path: object, cleanup: Callable[[], Any] | None = None) -> None:
    fault = write_fault(e, path)
    if fault is None:
        raise e
    if cleanup is not None:
        cleanup()
    raise fault from None


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why files cannot be made in the folder ``path`` (created if missing), or None: its nearest
    existing part is a file, or is a folder this process cannot write (permissions, read-only disk)."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    while not os.path.exists(p) and p.parent != p:
        p = p.parent
    if not p.is_dir():
        return f"{p} is a file, not a folder"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable ({CAUSES[errno.EROFS] if _read_only(p) else CAUSES[errno.EACCES]})"
    return None


def _read_only(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def disk_fault(e: BaseException) -> WriteFault | None:
    """A full, over-quota or read-only disk anywhere in the chain of an error no writer mapped (a log
    file, a library's own file), named by the ``OSError``'s file; None for anything else."""
    cur: BaseException | None = e
    for _ in range(8):
        if cur is None:
            return None
        if isinstance(cur, OSError) and cur.errno in DISK:
            return WriteFault(cur.filename or "a file", CAUSES[cur.errno])
        cur = cur.__cause__ or cur.__context__
    return None


class FaultMappedConnection(sqlite3.Connection):
    """A SQLite connection (``sqlite3.connect(path, factory=FaultMappedConnection)``) whose statements
    and commits raise a :class:`WriteFault` naming the database file on a disk or permission fault."""

    def __init__(self, database: Any, *args: Any, **kwargs: Any):
        super().__init__(database, *args, **kwargs)
        self.db_path = database

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        with writing(self.db_path):
            return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        with writing(self.db_path):
            return super().executemany(*args, **kwargs)

    def executescript(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        with writing(self.db_path):
            return super().executescript(*args, **kwargs)

    def commit(self) -> None:
        with writing(self.db_path):
            super().commit()

    def __exit__(self, *exc: Any) -> Any:
        with writing(self.db_path):
            return super().__exit__(*exc)
