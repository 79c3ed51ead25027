"""Reading JSON / JSONL records with errors that name the file, the record and the field.

Shared by every loader: :func:`read_json` (one JSON document), :func:`iter_jsonl` (one record a
line, ``.jsonl.zst`` when ``zstandard`` is installed) and :func:`field` (a typed field of a record).
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Iterator

from .errors import DataError

_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object", float: "a number"}


def read_json(path: Path) -> Any:
    """One JSON document, or a DataError naming the file and the line/column of the fault."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise DataError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None


def open_text(path: Path) -> io.TextIOBase:
    """A text stream for ``.jsonl`` or ``.jsonl.zst`` (zstandard compressed, as the Pile ships)."""
    if path.name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise DataError(path, "is zstandard-compressed; install the reader with `pip install zstandard`"
                                  " or decompress it first (`zstd -d FILE`)") from None
        raw = open(path, "rb")
        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.TextIOWrapper(reader, encoding="utf-8")
    try:
        return open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line; each record must be a JSON object."""
    with open_text(path) as f:
        lineno = 0
        while True:
            try:
                line = f.readline()
            except UnicodeDecodeError as e:
                raise DataError(path, f"not UTF-8 text ({e.reason})", record=f"line {lineno + 1}") from None
            if not line:
                return
            lineno += 1
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(path, f"malformed JSON ({e.msg} at column {e.colno})", record=f"line {lineno}") from None
            if not isinstance(rec, dict):
                raise DataError(path, f"expected a JSON object, got {type(rec).__name__}", record=f"line {lineno}")
            yield lineno, rec


def field(rec: Any, name: str, typ: type | tuple[type, ...], path: Path, record: object,
          default: Any = ..., prefix: str = "") -> Any:
    """``rec[name]`` checked against ``typ``; missing → default if given, else DataError."""
    label = f"{prefix}{name}"
    if not isinstance(rec, dict):
        raise DataError(path, f"expected an object, got {type(rec).__name__}", record=record, field=prefix.rstrip(".") or None)
    if name not in rec:
        if default is not ...:
            return default
        raise DataError(path, "missing required field", record=record, field=label)
    val = rec[name]
    types = typ if isinstance(typ, tuple) else (typ,)
    # bool is an int in Python; a JSON true where a number belongs is still a type error
    if not isinstance(val, types) or (isinstance(val, bool) and bool not in types):
        want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise DataError(path, f"expected {want}, got {type(val).__name__} ({_short(val)})", record=record, field=label)
    return val


def _short(val: Any, n: int = 40) -> str:
    s = repr(val)
    return s if len(s) <= n else s[: n - 3] + "..."
