"""``python -m ctxbench data download NAME``: fetch a dataset's real files into data/downloads/.

Direct files (LoCoMo; LongMemEval's three files through the hub's resolve URLs) are streamed to a temporary file next to the destination, checked against
their sha256 and moved into place atomically; hub datasets (PwC, Pile) are read with ``datasets``
and written as JSONL the same way. Offline, every path fails with one line saying so.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from tqdm import tqdm

from ctxbench.core.registry import suggest
from ctxbench.data.errors import DataError
from ctxbench.data.hub import hub_offline, iter_hub_rows
from ctxbench.data.sources import SOURCES, RemoteFile, downloads_dir

CHUNK = 1 << 20
TIMEOUT_S = 60


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_writer(dest: Path, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Run ``write(file)`` on a temp file in dest's folder, then rename it onto dest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write(f)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def fetch_url(url: str, dest: Path, sha256: str | None = None, timeout: float = TIMEOUT_S) -> str:
    """Download ``url`` to ``dest`` atomically; verify ``sha256`` when given. Returns the digest."""
    h = hashlib.sha256()

    def write(f: Any) -> None:
        try:
            resp = urlopen(Request(url, headers={"User-Agent": "ctxbench-data"}), timeout=timeout)
        except HTTPError as e:
            raise DataError(url, f"download failed: HTTP {e.code} {e.reason}") from None
        except (URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DataError(url, f"download failed ({reason}); no network? Download it elsewhere and copy it to "
                                 f"{dest}, or pass url=<mirror>") from None
        with resp:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                while True:
                    try:
                        block = resp.read(CHUNK)
                    except OSError as e:
                        raise DataError(url, f"download interrupted ({e})") from None
                    if not block:
                        break
                    h.update(block)
                    f.write(block)
                    bar.update(len(block))
        if sha256 and h.hexdigest() != sha256:
            raise DataError(url, f"checksum mismatch: got sha256 {h.hexdigest()}, expected {sha256}; "
                                 f"{dest} was not written")

    _atomic_writer(dest, write)
    return h.hexdigest()


def write_jsonl(rows: Iterable[dict[str, Any]], dest: Path, keys: tuple[str, ...], limit: int | None = None,
                desc: str = "") -> int:
    """Rows (only ``keys``) → JSONL at ``dest``, atomically. Returns the row count."""
    n = 0

    def write(f: Any) -> None:
        nonlocal n
        for row in tqdm(rows, desc=desc or dest.name, unit="rows", total=limit):
            if limit and n >= limit:
                break
            f.write(json.dumps({k: row.get(k) for k in keys}, ensure_ascii=False) + "\n")
            n += 1

    _atomic_writer(dest, write, mode="w")
    return n


def _file_target(f: RemoteFile, dest: str | None, n_files: int) -> Path:
    if not dest:
        return downloads_dir() / f.filename
    d = Path(dest)
    return d / f.filename if (d.is_dir() or n_files > 1 or str(dest).endswith(os.sep)) else d


def download(name: str, dest: str | None = None, url: str | None = None, force: bool = False,
             limit: int | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Fetch dataset ``name``'s files; returns the paths written (or already present and verified)."""
    if name not in SOURCES:
        raise DataError(f"dataset {name!r}", f"no download source.{suggest(name, list(SOURCES))}")
    src = SOURCES[name]
    written: list[Path] = []
    if src.files:
        for f in src.files:
            target = _file_target(f, dest, len(src.files))
            if target.exists() and not force and (f.sha256 is None or sha256_file(target) == f.sha256):
                log(f"{name}: {target} already present" + (" (sha256 ok)" if f.sha256 else ""))
                written.append(target)
                continue
            if "huggingface.co/" in (url or f.url) and hub_offline():
                raise DataError(url or f.url, "is a hub file but the hub is offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE "
                                              f"set): unset them on a machine with network, or copy it to {target}")
            digest = fetch_url(url or f.url, target, f.sha256)
            log(f"{name}: wrote {target} (sha256 {digest}{', verified' if f.sha256 else ''})")
            written.append(target)
    elif src.hub_id:
        keys = ("input", "prompt", "answer") if name == "pwc" else ("text", "meta")
        if limit is None and src.default_limit:
            limit = src.default_limit
            log(f"{name}: fetching the first {limit} rows per split (limit=N to change, limit=0 for all)")
        base = Path(dest) if dest else downloads_dir()
        if base.suffix and len(src.hub_splits) > 1:
            raise DataError(base, f"dest must be a folder: {name} has {len(src.hub_splits)} splits "
                                  f"({', '.join(src.hub_splits)})", field="dest")
        for split in src.hub_splits:
            target = base / f"{name}_{split}.jsonl" if not base.suffix else base
            if target.exists() and not force:
                log(f"{name}: {target} already present (force=true to refetch)")
                written.append(target)
                continue
            n = write_jsonl(iter_hub_rows(url or src.hub_id, split, name), target, keys, limit, f"{name}:{split}")
            digest = sha256_file(target)
            target.with_name(target.name + ".sha256").write_text(f"{digest}  {target.name}\n")
            log(f"{name}: wrote {n} rows of {url or src.hub_id}:{split} to {target} (sha256 {digest})")
            written.append(target)
    else:
        if not url:
            raise DataError(f"dataset {name!r}", f"no direct download: {src.manual}")
        target = Path(dest) if dest else downloads_dir() / "dialsim" / Path(url.split("?")[0]).name
        digest = fetch_url(url, target, None)
        log(f"{name}: wrote {target} (sha256 {digest}; no published checksum to verify against)")
        written.append(target)
        if target.suffix == ".zip":
            written += extract_pickles(target, log)
    return written


def extract_pickles(archive: Path, log: Callable[[str], None] = print) -> list[Path]:
    """The ``*.pickle`` members of a zip, next to it (DialSim's zip uses Deflate64: explain if so)."""
    import zipfile

    out = []
    try:
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                if member.endswith(".pickle") and not member.startswith(("/", "..")):
                    dest = archive.parent / Path(member).name
                    _atomic_writer(dest, lambda f, m=member: f.write(z.read(m)))
                    log(f"extracted {dest}")
                    out.append(dest)
    except NotImplementedError as e:  # "That compression method is not supported" (Deflate64)
        raise DataError(archive, f"cannot extract ({e}); extract it with 7-Zip or `unzip` into {archive.parent}") from None
    except zipfile.BadZipFile as e:
        raise DataError(archive, f"not a zip file ({e})") from None
    return out
