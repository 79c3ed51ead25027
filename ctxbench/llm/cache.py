"""A SQLite call cache for any chat backend, so a rerun or a resumed crash repeats no calls.

The key is a SHA-256 of everything that changes a reply: the backend, the model id (the
backend's ``cache_id``: for ``hf`` name, path, revision and dtype; for ``openai`` model, base_url
and extra_body, and for a structured call the mechanism it is sent with — json_schema,
json_object_schema, ... (:mod:`.structured_modes`): under ``llm.response_format=auto`` the first
structured call's key probes the server, so a rerun replaying every call from the cache still sends
the probe's few tokens and needs the server up, as preflight does; a server that changed what it
enforces gets new keys, not replies asked another way), the context window, the messages, max_new_tokens, temperature, json_mode, the
schema, and the call's ``stop`` strings when it has any (:mod:`.stop`; a call without them keeps its old key). Only successful, non-empty replies that SQLite holds as they are (UTF-8 text, counts that fit
its integers) are stored: a failed, empty or malformed reply is asked again on the next run. A cache hit returns the stored text and token counts (so the
cost a system reports does not depend on the cache) with ``cached=True``, and is counted in the
meter like any call. The counts keep the ``token_source`` of the call that made them (two bits of
the ``flags`` column); a row written before sources were stored says ``"cache"``. The model the
server said answered (``ChatResult.served_model``) is kept in the ``model`` column (added to an older
table; an older row, or an older ctxbench's, says ``"cache"``). The file is
``llm.cache_path`` if set, else ``$CTXBENCH_CACHE/llm_cache.sqlite`` (default
``~/.cache/ctxbench/llm_cache.sqlite``), shared by runs; ``llm.cache=false`` turns caching off. Safe across threads and processes (WAL, busy timeout).
A damaged file is a one-line :class:`~ctxbench.data.errors.DataError` naming it (delete it); a row
that is not what :meth:`CallCache.put` writes (text not a string, counts not integers) is a miss:
the call is asked again and its row rewritten.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ctxbench.core.paths import cache_root
from ctxbench.core.write_faults import FaultMappedConnection, write_fault, writing
from ctxbench.data.errors import DataError
from ctxbench.llm.base import BackendWrapper, ChatResult, Message, backend_kwargs, preflight
from ctxbench.llm.token_count import CACHE, ESTIMATE, SERVER, TOKENIZER


def default_cache_path() -> Path:
    return cache_root() / "llm_cache.sqlite"


def cache_key(backend: str, model: str, messages: list[Message], **params: Any) -> str:
    payload = json.dumps({"backend": backend, "model": model, "messages": messages, "params": params},
                         sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


MAX_COUNT = (1 << 63) - 1  # SQLite's largest integer


def call_cache_id(inner: Any, structured: bool) -> str:
    """The backend's model id for one call's key: ``call_cache_id(structured)`` where it has one (``llm=openai``:
    a structured call's names how it is sent, which ``auto`` learns by probing the server), else ``cache_id``."""
    per_call = getattr(inner, "call_cache_id", None)
    if callable(per_call):
        return per_call(structured)
    return getattr(inner, "cache_id", inner.model_name)


def storable(r: ChatResult) -> bool:
    """Only a successful, non-empty, well-formed reply goes into the cache (an empty one is asked again;
    text that is not valid Unicode or counts SQLite cannot hold would fail the write, or every rerun)."""
    if r.failed or not r.text.strip() or not stored_row((r.text, r.prompt_tokens, r.completion_tokens, None)):
        return False
    return max(r.prompt_tokens, r.completion_tokens) <= MAX_COUNT and utf8(r.text) and utf8(r.served_model)


def utf8(text: str) -> bool:
    """``text`` encodes to UTF-8 (no lone surrogates, which a JSON ``"\\ud800"`` escape makes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


TRUNCATED, CONSTRAINED = 1, 2  # bits of the ``flags`` column
SOURCE_SHIFT = 2  # bits 2-3 of ``flags``: the token_source of the counts (0: not stored, an older row)
STOPPED = 16  # bit 4: a stop string ended the reply (ChatResult.stopped)
SOURCE_CODES = {SERVER: 1, TOKENIZER: 2, ESTIMATE: 3}
SOURCE_OF_CODE = {v: k for k, v in SOURCE_CODES.items()}


def stored_row(row: Any) -> bool:
    """A ``(text, prompt_tokens, completion_tokens, flags)`` row as :meth:`CallCache.put` writes it."""
    return (row is not None and isinstance(row[0], str) and bool(row[0].strip())
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in row[1:3])
            and (row[3] is None or (isinstance(row[3], int) and not isinstance(row[3], bool)
                                    and 0 <= row[3] < 2 * STOPPED)))


def pack_flags(r: ChatResult) -> int:
    """truncated, constrained, stopped and the token source of ``r`` as the ``flags`` integer."""
    code = SOURCE_CODES.get(r.token_source, 0)
    return (TRUNCATED * int(r.truncated) + CONSTRAINED * int(r.constrained) + (code << SOURCE_SHIFT)
            + STOPPED * int(r.stopped))


def flags_source(flags: int) -> str:
    """The token source stored in ``flags``; ``"cache"`` for a row that did not store one."""
    return SOURCE_OF_CODE.get((flags >> SOURCE_SHIFT) & 3, CACHE)


COLUMNS = {"flags": "INTEGER", "model": "TEXT"}  # added to a table made before them, in this order


class CallCache:
    """key → (text, prompt_tokens, completion_tokens, flags, model) in one SQLite table (flags: truncated,
    constrained, stopped, token source: :func:`pack_flags`; model: the served model, NULL when not known)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._guard():
            self._check_length()
            conn = self._conn()
            # one process at a time (several rows of a board may open a new cache together): the table is
            # made with every column, an older table gains the missing :data:`COLUMNS` once, inside one write
            # transaction
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, text TEXT NOT NULL, "
                             "prompt_tokens INTEGER, completion_tokens INTEGER, created REAL, flags INTEGER, "
                             "model TEXT)")
                have = {r[1] for r in conn.execute("PRAGMA table_info(calls)")}
                for name, kind in COLUMNS.items():
                    if name not in have:
                        conn.execute(f"ALTER TABLE calls ADD COLUMN {name} {kind}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _check_length(self) -> None:
        """A file shorter than the pages its header counts was cut short (a copy or a disk that stopped):
        refused before use, since SQLite reads only the pages a query touches and would not notice. Not
        checked while a -wal file holds pages (a crashed writer's: SQLite replays them)."""
        if not self.path.is_file() or self.path.stat().st_size < 100:
            return
        wal = Path(str(self.path) + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return
        with open(self.path, "rb") as f:
            head = f.read(100)
        if not head.startswith(b"SQLite format 3\x00"):
            raise sqlite3.DatabaseError("file is not a database")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        pages = int.from_bytes(head[28:32], "big")
        valid = head[24:28] == head[92:96]  # the in-header size is valid when its change counter matches
        if valid and pages and self.path.stat().st_size < pages * page:
            raise sqlite3.DatabaseError(f"the file is {self.path.stat().st_size} bytes, shorter than the "
                                        f"{pages} pages of {page} bytes its header counts: it was cut short")

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite errors become one line naming the file (a full disk or a read-only file: a
        :class:`~ctxbench.core.write_faults.WriteFault`; a damaged file: delete it)."""
        try:
            yield
        except sqlite3.OperationalError as e:
            fault = write_fault(e, self.path)
            if fault is not None:
                raise fault from None
            raise DataError(self.path, f"the LLM call cache cannot be used ({e}); fix the file or its "
                                       "folder, or run with llm.cache=false") from None
        except sqlite3.DatabaseError as e:
            raise DataError(self.path, f"the LLM call cache is damaged ({e}): delete this file (and its "
                                       "-wal/-shm files; it is rebuilt from new calls), or run with "
                                       "llm.cache=false") from None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60)
            for attempt in range(100):  # switching a new file to WAL does not wait on another process's lock
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) or attempt == 99:
                        raise
                    time.sleep(0.05)
            self._local.conn = conn
        return conn

    def get(self, key: str) -> ChatResult | None:
        with self._guard():
            row = self._conn().execute("SELECT text, prompt_tokens, completion_tokens, flags, model FROM calls "
                                       "WHERE key=?", (key,)).fetchone()
        if not stored_row(row):
            return None
        flags = row[3] or 0
        return ChatResult(text=row[0], prompt_tokens=row[1], completion_tokens=row[2], cached=True,
                          truncated=bool(flags & TRUNCATED), constrained=bool(flags & CONSTRAINED),
                          stopped=bool(flags & STOPPED),
                          token_source=flags_source(flags),
                          served_model=row[4] if isinstance(row[4], str) and row[4] else CACHE)

    def put(self, key: str, r: ChatResult) -> None:
        flags = pack_flags(r)
        with self._guard(), self._conn() as c:
            c.execute("INSERT OR REPLACE INTO calls (key, text, prompt_tokens, completion_tokens, created, flags, model) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, r.text, r.prompt_tokens, r.completion_tokens, time.time(),
                                                       flags, r.served_model or None))

    def __len__(self) -> int:
        with self._guard():
            return int(self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0])


class CachedLLM(BackendWrapper):
    """Wraps a backend (``inner``); shares its meter, window and token counting."""

    def __init__(self, inner: Any, path: str | Path, backend: str):
        self.inner = inner
        self.cache = CallCache(path)
        self.backend = backend
        self.meter = inner.meter
        self._written: set[bytes] = set()  # keys this process stored (a hit on one is reuse within the run)
        self._served: dict[str, dict[str, int]] = {}  # phase -> {"this_run": n, "earlier_runs": n}
        self._count_lock = threading.Lock()

    def preflight(self) -> None:
        """The inner backend's cheap availability check, if it has one."""
        preflight(self.inner)

    def _key(self, messages: list[Message], max_new_tokens: int, temperature: float, json_mode: bool,
             schema: dict[str, Any] | None = None, seed: int | None = None, stop: list[str] | None = None) -> str:
        model_id = call_cache_id(self.inner, schema is not None or bool(json_mode))
        extra: dict[str, Any] = {} if seed is None else {"seed": int(seed)}  # unseeded keys stay as they were
        if stop:  # so do keys of calls without stop strings
            extra["stop"] = list(stop)
        return cache_key(self.backend, model_id, messages, max_new_tokens=max_new_tokens,
                         temperature=float(temperature), json_mode=bool(json_mode),
                         context_window=int(self.inner.context_window), schema=schema, **extra)

    @staticmethod
    def _params(max_new_tokens: int, temperature: float, phase: str, json_mode: bool,
                schema: dict[str, Any] | None, seed: int | None = None,
                stop: list[str] | None = None) -> dict[str, Any]:
        """The inner call's keywords (:func:`~.base.backend_kwargs`)."""
        return backend_kwargs(dict(max_new_tokens=max_new_tokens, temperature=temperature, phase=phase,
                                   json_mode=json_mode, schema=schema, seed=seed, stop=stop))

    def _hit(self, key: str, phase: str) -> ChatResult | None:
        r = self.cache.get(key)
        if r is not None:
            self.meter.add(phase, r)
            with self._count_lock:
                c = self._served.setdefault(phase, {"this_run": 0, "earlier_runs": 0})
                c["this_run" if bytes.fromhex(key) in self._written else "earlier_runs"] += 1
        return r

    def _put(self, key: str, r: ChatResult) -> None:
        if storable(r):
            self.cache.put(key, r)
            with self._count_lock:
                self._written.add(bytes.fromhex(key))

    def served_from_cache(self) -> dict[str, dict[str, int]]:
        """Per phase, the calls this process's cache served: ``this_run`` (a reply this process stored, asked
        for again: a session shared by two histories) and ``earlier_runs`` (a row an earlier run, or another
        process, wrote). Their sum is the meter's ``cached`` count of that phase."""
        with self._count_lock:
            return {ph: dict(c) for ph, c in self._served.items()}

    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False, schema: dict[str, Any] | None = None,
             seed: int | None = None, stop: list[str] | None = None) -> ChatResult:
        key = self._key(messages, max_new_tokens, temperature, json_mode, schema, seed, stop)
        hit = self._hit(key, phase)
        if hit is not None:
            return hit
        r = self.inner.chat(messages, **self._params(max_new_tokens, temperature, phase, json_mode, schema, seed,
                                                     stop))
        self._put(key, r)
        return r

    def chat_batch(self, batch: list[list[Message]], *, max_new_tokens: int = 64, temperature: float = 0.0,
                   phase: str = "answer", json_mode: bool = False,
                   schema: dict[str, Any] | None = None, seed: int | None = None,
                   stop: list[str] | None = None) -> list[ChatResult]:
        keys = [self._key(m, max_new_tokens, temperature, json_mode, schema, seed, stop) for m in batch]
        out: list[ChatResult | None] = [self._hit(k, phase) for k in keys]
        todo = [i for i, r in enumerate(out) if r is None]
        if todo:
            kw = self._params(max_new_tokens, temperature, phase, json_mode, schema, seed, stop)
            if hasattr(self.inner, "chat_batch"):
                fresh = self.inner.chat_batch([batch[i] for i in todo], **kw)
            else:
                fresh = [self.inner.chat(batch[i], **kw) for i in todo]
            for i, r in zip(todo, fresh):
                out[i] = r
                self._put(keys[i], r)
        return [r for r in out if r is not None]


def maybe_cached(llm: Any, cfg: Any) -> Any:
    """Wrap ``llm`` in the call cache unless ``cfg.cache`` is false."""
    if not cfg.cache:
        return llm
    return CachedLLM(llm, cfg.cache_path or default_cache_path(), backend=cfg.name)
