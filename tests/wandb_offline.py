"""Read an offline wandb run back: its ``run-<id>.wandb`` records (run, config, summary) and the tables
written under ``files/media/table/``.

wandb >= 0.19 writes the ``.wandb`` file from its Go core and ships no Python reader: the file is a
LevelDB-style log (a 7-byte header ``:W&B`` + magic + version, then 32 KiB blocks of chunks, each with a
7-byte header: crc32, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4), each record a
``wandb_internal_pb2.Record``.
"""
from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

BLOCK = 32768


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb run file"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def run_file(folder: Path, wait_s: float = 15.0) -> Path:
    """The one ``run-*.wandb`` file of an offline run folder, waited for (wandb's writer is another process)."""
    deadline = time.monotonic() + wait_s
    while True:
        files = list(Path(folder).glob("run-*.wandb"))
        if len(files) == 1 or time.monotonic() >= deadline:
            assert len(files) == 1, f"{folder}: expected one run-*.wandb file, found {files}"
            return files[0]
        time.sleep(0.2)


def whole_records(path: Path, wait_s: float = 15.0) -> list[Any]:
    """:func:`records` of a run file its writer has finished (its last record ``exit``). wandb's writer is
    another process: a file read before it is done lacks its records, so a late file is waited for (up to
    ``wait_s``) and one never finished fails here, by name, not later as a missing field."""
    deadline = time.monotonic() + wait_s
    while True:
        recs = records(path)
        if recs and recs[-1].WhichOneof("record_type") == "exit":
            return recs
        assert time.monotonic() < deadline, f"{path}: the wandb writer never finished it ({len(recs)} records, no exit)"
        time.sleep(0.2)


def _key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


class OfflineRun:
    """One offline run folder (``<WANDB_DIR>/wandb/offline-run-<time>-<id>``)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        path = run_file(self.folder)
        self.run_id = path.stem[len("run-"):]
        self.config: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.run: Any = None
        for rec in whole_records(path):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                self.run = rec.run
                for item in rec.run.config.update:
                    self.config[_key(item)] = json.loads(item.value_json)
            elif kind == "config":
                for item in rec.config.update:
                    self.config[_key(item)] = json.loads(item.value_json)
            elif kind == "summary":
                for item in rec.summary.update:
                    self.summary[_key(item)] = json.loads(item.value_json)

    def table(self, key: str) -> list[dict[str, Any]]:
        """The rows of the table logged under ``key`` (its ``media/table/<key>_*.table.json``), as dicts."""
        found = sorted((self.folder / "files" / "media" / "table").glob(f"{key}_*.table.json"))
        assert found, f"{self.folder}: no table {key!r} was written"
        data = json.loads(found[-1].read_text())
        return [dict(zip(data["columns"], row)) for row in data["data"]]

    def images(self, key: str) -> list[Path]:
        return sorted((self.folder / "files" / "media" / "images").glob(f"{key}_*"))


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every offline run under ``wandb_dir`` (``<wandb_dir>/wandb/offline-run-*``), oldest first."""
    return [OfflineRun(p) for p in sorted(Path(wandb_dir).glob("wandb/offline-run-*"))]
