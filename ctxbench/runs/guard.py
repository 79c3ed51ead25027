"""A run folder belongs to one config and to one process at a time.

:func:`claim` is called once by ``eval`` and ``train`` as soon as the run folder exists:

0. **No links.** A run folder holding a symbolic link anywhere below it is refused in one line naming
   the link and its target: a resume would append to, truncate or replace the file outside the folder.
   (The folder itself may be reached through a link, e.g. ``outputs -> /data/outputs``.) Run files
   are also opened without following links (``O_NOFOLLOW``: the lock here, ``open_append`` and
   ``atomic_write_text`` in :mod:`ctxbench.runs.results`), for a link made while a run is on.
1. **Lock.** ``<run>/.ctxbench/lock`` is locked with ``flock(LOCK_EX | LOCK_NB)`` and held until
   the process exits (the kernel drops it then, so a killed run leaves no stale lock). A second
   process on the same folder is refused in one line naming the holder's pid.
2. **Config.** The first run records the resolved config (secrets redacted) and its sha256
   fingerprint in ``<run>/.ctxbench/run.json``. A rerun with a different config is refused in one
   line naming each differing key with both values; ``force_resume=true`` accepts the new config
   and records it. Keys that cannot change results are left out (:data:`EXCLUDED_KEYS`).
   A folder with results files (:data:`RESULT_FILES`) but no run record was not made by a run of
   this guard: its files are someone else's, and resuming would adopt them as this config's answers.
   It is refused in one line; ``force_resume=true`` adopts them knowingly (and records the config).

Under a multi-process launch (``WORLD_SIZE > 1``) only rank 0 locks and writes; the other ranks
check the config read-only, so they are never refused by rank 0's own lock.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.core.plain import differences, fingerprint, plain_config, plain_data, summarize, without_keys  # noqa: F401

GUARD_DIR, LOCK_FILE, RUN_FILE = ".ctxbench", "lock", "run.json"

#: Dotted config keys (fnmatch patterns, a match also drops everything below it) that cannot change
#: a run's results, so a resume may change them freely:
#: progress bars, Hydra's own settings, logging, resume/stop controls, data-loader workers, this
#: guard's own switch; how many workers answer (``concurrency``, ``llm.concurrency``: answers do not
#: depend on completion order) and whether samples are logged; ``limit`` only selects how many questions (in dataset order) are answered, so
#: a larger limit on resume legitimately answers more; ``metrics`` / ``judge_llm`` / ``judge`` are re-scored
#: over every prediction at the end of each run, and so is the corrected gold of ``dataset.errata``; the LLM
#: call cache only replays identical calls; where memory=http's remote listens and how patiently it is asked
#: (a remote restarted on another port resumes; its name and version are checked by the history's store).
EXCLUDED_KEYS: tuple[str, ...] = (
    "progress", "*.progress", "hydra", "logger", "force_resume",
    "trainer.resume", "trainer.stop_after", "trainer.log_every", "trainer.save_every", "trainer.keep_checkpoints",
    "num_workers", "*.num_workers", "limit", "metrics", "judge_llm", "judge", "max_failed_fraction",
    "llm.cache", "llm.cache_path", "concurrency", "llm.concurrency", "log_samples", "dataset.errata",
    "memory.url", "memory.timeout_s", "memory.retries", "memory.backoff_s",  # memory=http: where and how patiently
)

#: What a run leaves in its folder (fnmatch patterns); beside them a run record must say whose they are.
RESULT_FILES: tuple[str, ...] = ("predictions.jsonl", "predictions.rank*.jsonl", "samples.jsonl",
                                 "samples.rank*.jsonl", "results.json", "metrics.jsonl", "checkpoints",
                                 "train_summary.json")

_HELD: dict[str, int] = {}  # resolved run folder → open lock fd (kept for the process lifetime)
_FORCED: set[str] = set()  # run folders claimed with force_resume=true


class RunFolderError(DataError):
    """A run folder that cannot be used as asked (in use, or made with another config); one line."""

    def __init__(self, path: object, message: str):
        ValueError.__init__(self, message)
        self.path, self.record, self.field = path, None, None


# ---- the one entry point -------------------------------------------------------------------------

def claim(run_dir: str | Path, cfg: Any, *, main: bool | None = None) -> dict[str, Any]:
    """Lock ``run_dir`` for this process and bind it to ``cfg``; returns the recorded run.json.

    ``main`` says whether this is rank 0 (default: ``RANK`` from the environment is 0).
    """
    run = Path(run_dir)
    if main is None:
        main = int(os.environ.get("RANK", "0")) == 0
    refuse_links(run)
    if main:
        acquire_lock(run)
    return check_config(run, cfg, force=_force(cfg), write=main)


def forced(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` (or a folder above it) was claimed with ``force_resume=true`` in this process."""
    p = Path(run_dir).resolve()
    return any(str(q) in _FORCED for q in (p, *p.parents))


def _force(cfg: Any) -> bool:
    try:
        return bool(cfg.get("force_resume", False))
    except AttributeError:
        return False


# ---- links ---------------------------------------------------------------------------------------

#: wandb's own folder in a run folder (``logger=wandb``): wandb links its core's log there; none of the run's
#: files is written inside it (the folder itself, if a link, is still refused)
WANDB_DIR = "wandb"


def links_inside(run_dir: str | Path) -> list[Path]:
    """Every symbolic link below ``run_dir`` (a linked folder is listed, never entered; wandb's own
    ``<run>/wandb/`` is not entered)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(run_dir):  # followlinks=False; the top itself may be reached via a link
        found += [Path(root) / n for n in sorted(dirs + files) if (Path(root) / n).is_symlink()]
        if root == str(run_dir) and WANDB_DIR in dirs:
            dirs.remove(WANDB_DIR)
    return found


def refuse_links(run_dir: str | Path) -> None:
    """A one-line RunFolderError when the run folder holds a symbolic link, before anything is opened."""
    links = links_inside(run_dir)
    if not links:
        return
    first = links[0]
    try:
        target = os.readlink(first)
    except OSError:
        target = "?"
    more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
    raise RunFolderError(first, f"{first} is a symbolic link (to {target}) inside the run folder {run_dir}{more}; "
                                "a run never writes through links: replace it with a real file, "
                                "or use another hydra.run.dir")


# ---- the lock ------------------------------------------------------------------------------------

def acquire_lock(run_dir: str | Path) -> None:
    """Hold ``<run>/.ctxbench/lock`` until this process exits; refuse if another process holds it."""
    run = Path(run_dir)
    key = str(run.resolve())
    if key in _HELD:
        return
    path = run / GUARD_DIR / LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:  # .ctxbench is a file, the lock a folder or a link (ELOOP), no permission ...
        raise RunFolderError(path, f"{path}: cannot open the run folder's lock file ({e.strerror or e}); "
                                   f"delete {run / GUARD_DIR} if it is damaged, or use another hydra.run.dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _read_pid(fd)
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = f" (pid {holder})" if holder else ""
            raise RunFolderError(run, f"{run} is in use by another ctxbench process{who}; "
                                      "wait for it or use another hydra.run.dir") from None
        print(f"ctxbench: warning: cannot lock {path} ({e.strerror}); not protected against a second process",
              file=sys.stderr)
        return
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    os.fsync(fd)
    _HELD[key] = fd


def release_lock(run_dir: str | Path) -> None:
    """Drop this process's lock on ``run_dir`` (the process exiting does the same)."""
    fd = _HELD.pop(str(Path(run_dir).resolve()), None)
    if fd is not None:
        os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32).decode(errors="replace").strip()
    except OSError:
        return ""


# ---- the config fingerprint ----------------------------------------------------------------------

def resolved_config(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain data, secrets redacted, :data:`EXCLUDED_KEYS` left out."""
    from ctxbench.core.secrets import redact

    plain = redact(plain_data(cfg))
    return without_keys(plain if isinstance(plain, dict) else {}, EXCLUDED_KEYS)


def check_config(run_dir: str | Path, cfg: Any, *, force: bool = False, write: bool = True) -> dict[str, Any]:
    """Compare ``cfg`` with the config ``run_dir`` was made with; record it on first use (or when forced)."""
    run = Path(run_dir)
    path = run / GUARD_DIR / RUN_FILE
    current = resolved_config(cfg)
    recorded = read_run_file(path)
    if recorded is None:
        found = result_files(run)
        if found and not force:
            raise RunFolderError(run, f"{run} holds results ({', '.join(found)}) but no run record ({path}): "
                                      "they were not made by this config; move them away (or use a new "
                                      "hydra.run.dir), or pass force_resume=true to adopt them as this run's")
        if found:
            _FORCED.add(str(run.resolve()))
    if recorded is not None:
        diffs = differences(without_keys(recorded.get("config") or {}, EXCLUDED_KEYS), current)
        if diffs and not force:
            raise RunFolderError(run, f"{run} was run with a different config: {summarize(diffs)} "
                                      "(use a new hydra.run.dir, or pass force_resume=true to reuse it)")
        if not diffs:
            return recorded
        _FORCED.add(str(run.resolve()))
    entry = {"fingerprint": fingerprint(current), "excluded_keys": list(EXCLUDED_KEYS), "config": current}
    if recorded is not None:
        entry["previous_fingerprints"] = [*recorded["previous_fingerprints"], recorded["fingerprint"]]
    if write:
        from ctxbench.runs.results import write_json

        write_json(path, entry)
    return entry


def result_files(run_dir: str | Path) -> list[str]:
    """The names in ``run_dir`` that are results of a run (:data:`RESULT_FILES`), sorted."""
    import fnmatch

    try:
        names = [p.name for p in Path(run_dir).iterdir()]
    except OSError:
        return []
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in RESULT_FILES))


def read_run_file(path: Path) -> dict[str, Any] | None:
    """``run.json`` as written by :func:`check_config`, or None when the folder has none yet."""
    if not path.exists():
        return None
    fix = "delete it to record the current config, or use a new hydra.run.dir"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise RunFolderError(path, f"{path}: unreadable run record ({' '.join(str(e).split())[:200]}); {fix}") from None
    except RecursionError:
        raise RunFolderError(path, f"{path}: unreadable run record (JSON nested too deeply); {fix}") from None
    problem = run_record_problem(data)
    if problem:
        raise RunFolderError(path, f"{path}: not a run record ({problem}); {fix}")
    data.setdefault("previous_fingerprints", [])
    return data


def run_record_problem(data: Any) -> str | None:
    """What makes parsed ``run.json`` not the record :func:`check_config` writes (None: nothing)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if not isinstance(data.get("config"), dict):
        return "no 'config' object"
    if not isinstance(data.get("fingerprint"), str):
        return "'fingerprint' is not a string"
    prev = data.get("previous_fingerprints", [])
    if not isinstance(prev, list) or not all(isinstance(f, str) for f in prev):
        return "'previous_fingerprints' is not a list of strings"
    return None
