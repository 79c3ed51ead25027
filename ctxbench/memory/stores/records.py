"""SQLite store of memory records, their change history, ingestion progress and per-history state.

One file per system in the run folder. Every add / update / delete writes a row to ``changes``
(old and new text and metadata), so what a memory system did to its store can be audited and
tested. Work is committed per ingestion step together with the progress counter, which is what
lets an interrupted evaluation resume exactly after the last applied step.
"""
from __future__ import annotations

import json
import sqlite3
import time as _time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxbench.core.write_faults import FaultMappedConnection
from ctxbench.data.errors import DataError, first_line

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
  id INTEGER PRIMARY KEY AUTOINCREMENT, history_id TEXT NOT NULL, kind TEXT NOT NULL,
  text TEXT NOT NULL, meta TEXT NOT NULL DEFAULT '{}', time TEXT NOT NULL DEFAULT '',
  deleted INTEGER NOT NULL DEFAULT 0, emb BLOB);
CREATE INDEX IF NOT EXISTS records_hk ON records(history_id, kind);
CREATE TABLE IF NOT EXISTS changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, history_id TEXT NOT NULL, record_id INTEGER,
  op TEXT NOT NULL, old TEXT, new TEXT, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
  history_id TEXT NOT NULL, stage TEXT NOT NULL, done INTEGER NOT NULL,
  PRIMARY KEY(history_id, stage));
CREATE TABLE IF NOT EXISTS state (
  history_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(history_id, key));
"""


#: Keys of the config given to :meth:`RecordStore.check_resume` that do not change what is stored.
# memory=http: where the remote listens and how patiently it is asked change nothing it builds (its name and
# version are checked apart: ctxbench/memory/http.py)
STORE_EXCLUDED = ("memory.progress", "memory.rebuild", "memory.url", "memory.timeout_s", "memory.retries",
                  "memory.backoff_s")


@dataclass
class Record:
    id: int
    kind: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)
    time: str = ""
    deleted: bool = False
    emb: np.ndarray | None = None


class StoreError(DataError):
    """A memory store that cannot be used: damaged, or not the store of this history and config."""

    def __init__(self, path: object, message: str):
        ValueError.__init__(self, f"{path}: {message}")
        self.path, self.record, self.field = path, None, None


REMEDY = "delete it (or set memory.rebuild=true) or use a new hydra.run.dir"


def open_sqlite(path: Path, schema: str, what: str) -> sqlite3.Connection:
    """Connect to ``path`` and apply ``schema``; a damaged file is a one-line :class:`StoreError`."""
    existed = path.exists() and path.stat().st_size > 0
    # the evaluator's workers use a history's store from several threads, one at a time (eval_pool.Gate)
    conn = sqlite3.connect(str(path), check_same_thread=False, factory=FaultMappedConnection)  # a full disk: one line
    try:
        if existed:
            bad = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
            if bad:
                raise sqlite3.DatabaseError(bad[0])
        conn.executescript(schema)
        conn.commit()
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(path, f"damaged {what}, not a readable SQLite database ({first_line(e)}); "
                               "delete it or use a new hydra.run.dir") from None
    return conn


def _emb_blob(emb: np.ndarray | None) -> bytes | None:
    return None if emb is None else np.asarray(emb, dtype=np.float32).tobytes()


def store_config(config: Any, model: str | None) -> dict[str, Any]:
    """What a history's records were built with: ``{"fingerprint", "config"}`` (secrets redacted)."""
    from ctxbench.core.plain import fingerprint, plain_data, without_keys
    from ctxbench.core.secrets import redact

    plain = without_keys(redact({"memory": plain_data(config), "llm": model}), STORE_EXCLUDED)
    return {"fingerprint": fingerprint(plain), "config": plain}


class RecordStore:
    """Records of one system, partitioned by history id. Call :meth:`commit` after each step."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = open_sqlite(self.path, SCHEMA, what="memory store")

    # ---- records -------------------------------------------------------------------------
    def _json(self, value: Any, where: str) -> Any:
        """A JSON cell of the store; one that does not parse is a one-line StoreError naming it."""
        try:
            return json.loads(value)
        except (TypeError, ValueError, RecursionError):
            raise StoreError(self.path, f"damaged memory store: {where} is not JSON ({str(value)[:60]!r}); "
                                        + REMEDY) from None

    def _row(self, r: tuple) -> Record:
        if r[6] is not None and (not isinstance(r[6], bytes) or len(r[6]) % 4):
            raise StoreError(self.path, f"damaged memory store: records.emb of record {r[0]} is not float32 "
                                        f"bytes; {REMEDY}")
        emb = None if r[6] is None else np.frombuffer(r[6], dtype=np.float32).copy()
        meta = self._json(r[3], f"records.meta of record {r[0]}")
        if not isinstance(meta, dict) or not isinstance(r[2], str):
            raise StoreError(self.path, f"damaged memory store: record {r[0]} has a text or meta of the wrong "
                                        f"type; {REMEDY}")
        return Record(id=r[0], kind=r[1], text=r[2], meta=meta, time=r[4], deleted=bool(r[5]), emb=emb)

    def add(self, hid: str, kind: str, text: str, meta: dict | None = None, time: str = "",
            emb: np.ndarray | None = None) -> int:
        meta = meta or {}
        cur = self.conn.execute(
            "INSERT INTO records(history_id, kind, text, meta, time, emb) VALUES (?,?,?,?,?,?)",
            (hid, kind, text, json.dumps(meta), time, _emb_blob(emb)))
        rid = int(cur.lastrowid)
        self._log(hid, rid, "ADD", None, {"text": text, "meta": meta, "kind": kind})
        return rid

    def get(self, rid: int) -> Record:
        r = self.conn.execute("SELECT id, kind, text, meta, time, deleted, emb FROM records WHERE id=?",
                              (rid,)).fetchone()
        if r is None:
            raise KeyError(f"{self.path}: no record with id {rid}")
        return self._row(r)

    def update(self, hid: str, rid: int, text: str | None = None, meta: dict | None = None,
               emb: np.ndarray | None = None, op: str = "UPDATE", time: str | None = None) -> None:
        """Change a record's text / meta / embedding / time (None: kept as it is)."""
        old = self.get(rid)
        new_text = old.text if text is None else text
        new_meta = old.meta if meta is None else meta
        self.conn.execute("UPDATE records SET text=?, meta=?, emb=COALESCE(?, emb), time=COALESCE(?, time) "
                          "WHERE id=?", (new_text, json.dumps(new_meta), _emb_blob(emb), time, rid))
        self._log(hid, rid, op, {"text": old.text, "meta": old.meta},
                  {"text": new_text, "meta": new_meta})

    def delete(self, hid: str, rid: int, op: str = "DELETE") -> None:
        """Soft delete: the record stays (with its history) but is no longer live."""
        old = self.get(rid)
        self.conn.execute("UPDATE records SET deleted=1 WHERE id=?", (rid,))
        self._log(hid, rid, op, {"text": old.text, "meta": old.meta}, None)

    def records(self, hid: str, kind: str | None = None, include_deleted: bool = False) -> list[Record]:
        q = "SELECT id, kind, text, meta, time, deleted, emb FROM records WHERE history_id=?"
        args: list[Any] = [hid]
        if kind is not None:
            q += " AND kind=?"
            args.append(kind)
        if not include_deleted:
            q += " AND deleted=0"
        return [self._row(r) for r in self.conn.execute(q + " ORDER BY id", args)]

    def changes(self, hid: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT record_id, op, old, new, at FROM changes WHERE history_id=? ORDER BY seq", (hid,))
        return [{"record_id": r[0], "op": r[1], "old": self._json(r[2], "changes.old") if r[2] else None,
                 "new": self._json(r[3], "changes.new") if r[3] else None, "at": r[4]} for r in rows]

    def _log(self, hid: str, rid: int | None, op: str, old: Any, new: Any) -> None:
        self.conn.execute("INSERT INTO changes(history_id, record_id, op, old, new, at) VALUES (?,?,?,?,?,?)",
                          (hid, rid, op, None if old is None else json.dumps(old),
                           None if new is None else json.dumps(new), _time.time()))

    # ---- progress and state ----------------------------------------------------------------
    def progress(self, hid: str, stage: str = "steps") -> int:
        r = self.conn.execute("SELECT done FROM progress WHERE history_id=? AND stage=?", (hid, stage)).fetchone()
        if r is not None and (not isinstance(r[0], int) or r[0] < 0):
            raise StoreError(self.path, f"damaged memory store: progress.done of history {hid!r} ({stage}) is "
                                        f"{r[0]!r}, not a count; {REMEDY}")
        return int(r[0]) if r else 0

    def set_progress(self, hid: str, done: int, stage: str = "steps") -> None:
        self.conn.execute("INSERT OR REPLACE INTO progress(history_id, stage, done) VALUES (?,?,?)",
                          (hid, stage, int(done)))

    def get_state(self, hid: str, key: str, default: Any = None) -> Any:
        r = self.conn.execute("SELECT value FROM state WHERE history_id=? AND key=?", (hid, key)).fetchone()
        return self._json(r[0], f"state {key!r} of history {hid!r}") if r else default

    def set_state(self, hid: str, key: str, value: Any) -> None:
        self.conn.execute("INSERT OR REPLACE INTO state(history_id, key, value) VALUES (?,?,?)",
                          (hid, key, json.dumps(value)))

    def check_resume(self, hid: str, n_steps: int, config: Any, model: str | None = None, *,
                     force: bool = False) -> None:
        """Before resuming ``hid``: the store must match its progress record, ``config`` and ``model``.

        Refuses (:class:`StoreError`) records without any applied step, more applied steps than the
        history has, or a store built under another config (unless the run was claimed with
        ``force_resume=true``). Records the config's fingerprint for the next resume.
        """
        from ctxbench.core.plain import differences, summarize

        done = self.progress(hid)
        n_records = self.conn.execute("SELECT COUNT(*) FROM records WHERE history_id=?", (hid,)).fetchone()[0]
        if done == 0 and n_records and n_steps:
            raise StoreError(self.path, f"history {hid!r} has {n_records} records but its progress record says no "
                                        f"step was applied (written by another process?); {REMEDY}")
        if done > n_steps:
            raise StoreError(self.path, f"history {hid!r} has {done} steps applied but this history has only "
                                        f"{n_steps} (built from another dataset or config); {REMEDY}")
        built = store_config(config, model)
        old = self.get_state(hid, "_config")
        if isinstance(old, dict) and old.get("fingerprint") != built["fingerprint"] and (done or n_records) \
                and not force:
            diffs = summarize(differences(old.get("config") or {}, built["config"])) or "fingerprint differs"
            raise StoreError(self.path, f"history {hid!r} was built with a different config: {diffs}; {REMEDY}")
        if old != built:
            self.set_state(hid, "_config", built)
            self.commit()

    def clear(self, hid: str) -> None:
        """Forget everything about one history (a fresh rebuild)."""
        for table in ("records", "changes", "progress", "state"):
            self.conn.execute(f"DELETE FROM {table} WHERE history_id=?", (hid,))
        self.conn.commit()

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()
