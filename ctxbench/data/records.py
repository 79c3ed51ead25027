"""Reading JSON / JSONL records with errors that name the file, the record and the field.

Shared by every loader: :func:`read_json` (one JSON document), :func:`iter_jsonl` (one record a
line, ``.jsonl.zst`` when ``zstandard`` is installed) and :func:`field` (a typed field of a record).
Both readers keep to :mod:`ctxbench.data.bounds` (file and line size, nesting depth, string length),
name the byte offset of non-UTF-8 bytes, and refuse ``NaN``/``Infinity``/``-Infinity`` (Python's
``json`` accepts them; they are not JSON, and a NaN answer would become the gold text "nan").
"""
from __future__ import annotations

import json
import os
import re
import reprlib
from pathlib import Path
from typing import Any, Iterator

from ctxbench.data.bounds import (MAX_LINE_BYTES, WHERE, check_file_size, check_json_text, decode_utf8, open_regular,
                                  read_bounded)
from ctxbench.data.errors import DataError

_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object", float: "a number"}


class NonJsonConstant(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a JSON text."""


def _refuse_constant(name: str) -> Any:
    raise NonJsonConstant(name)


_CONSTANT_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?Infinity|NaN', re.S)


def _constant_at(text: str, name: str) -> str:
    """Where the first bare ``name`` (outside strings) is in ``text``: "line L, column C"."""
    for m in _CONSTANT_TOKEN.finditer(text):
        if m.group() == name:
            at = m.start()
            return f"line {text.count(chr(10), 0, at) + 1}, column {at - text.rfind(chr(10), 0, at)}"
    return "position unknown"


def loads_strict(text: str, path: object, record: object = None) -> Any:
    """``json.loads`` within the bounds, refusing NaN/Infinity; any fault is a DataError."""
    check_json_text(text, path, record)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except NonJsonConstant as e:
        at = _constant_at(text, str(e))
        at = at if record is None else at.split(", ", 1)[-1]
        raise DataError(path, f"{e} is not JSON (at {at}; Python writes it for a float that is not a "
                              "number); write a string or a finite number", record=record) from None
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}, column {e.colno}" if record is None else f"column {e.colno}"
        raise DataError(path, f"malformed JSON ({e.msg} at {at})", record=record) from None
    except RecursionError:
        raise DataError(path, f"nested too deeply to parse {WHERE}", record=record) from None
    except ValueError as e:  # an integer past Python's 4300-digit conversion limit
        raise DataError(path, f"unreadable number ({e})", record=record) from None


def read_json(path: Path) -> Any:
    """One JSON document, or a DataError naming the file and the line/column of the fault."""
    check_file_size(path)
    return loads_strict(decode_utf8(read_bounded(path), path), path)


def open_binary(path: Path) -> Any:
    """A byte stream (``read(n)``) for ``.jsonl`` or ``.jsonl.zst`` (zstandard compressed, as the Pile ships)."""
    if path.name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise DataError(path, "is zstandard-compressed; install the reader with `pip install zstandard`"
                                  " or decompress it first (`zstd -d FILE`)") from None
        raw = os.fdopen(open_regular(path), "rb")
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return os.fdopen(open_regular(path), "rb")


CHUNK_BYTES = 1024 ** 2


def raw_lines(stream: Any, path: Path) -> Iterator[bytes]:
    """The lines of a byte stream (split on ``\\n`` only), each at most ``MAX_LINE_BYTES`` long."""
    buf: list[bytes] = []
    size, lineno = 0, 0
    while chunk := stream.read(CHUNK_BYTES):
        start = 0
        while (nl := chunk.find(b"\n", start)) != -1:
            buf.append(chunk[start:nl + 1])
            size += nl + 1 - start
            lineno += 1
            _check_line(size, path, lineno)
            yield b"".join(buf)
            buf, size, start = [], 0, nl + 1
        if start < len(chunk):
            buf.append(chunk[start:])
            size += len(chunk) - start
            _check_line(size, path, lineno + 1)
    if buf:
        yield b"".join(buf)


def _check_line(size: int, path: Path, lineno: int) -> None:
    if size > MAX_LINE_BYTES:
        raise DataError(path, f"line longer than {MAX_LINE_BYTES} bytes {WHERE}", record=f"line {lineno}")


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line (split on newlines only), bounded and UTF-8 checked."""
    with open_binary(path) as f:
        offset = 0
        for lineno, raw in enumerate(raw_lines(f, path), 1):
            line = decode_utf8(raw, path, record=f"line {lineno}", offset=offset)
            offset += len(raw)
            if line.strip():
                yield lineno, line


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line; each record must be a JSON object."""
    for lineno, line in iter_lines(path):
        rec = loads_strict(line, path, record=f"line {lineno}")
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
        raise DataError(path, f"expected {want}, got {type(val).__name__} ({short_repr(val)})", record=record, field=label)
    return val


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 30, 30
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4


def short_repr(val: Any, n: int = 40) -> str:
    """A one-line repr of at most ``n`` characters, cheap for huge or deeply nested values."""
    s = " ".join(_REPR.repr(val).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def short_text(val: Any, n: int = 40) -> str:
    """``str(val)`` for a record label, on one line and at most ``n`` characters (bounded for any value)."""
    s = " ".join(val.split()) if isinstance(val, str) else short_repr(val, n)
    return s if len(s) <= n else s[: n - 3] + "..."


def iter_json_array(path: Path) -> Iterator[tuple[int, Any]]:
    """(index, element) of a file holding one top-level JSON list, read one element at a time.

    For released files too large to hold twice (LongMemEval's M release is ~2.7 GB, past
    ``MAX_FILE_BYTES``): only the element being parsed is in memory, and each element keeps to
    ``MAX_LINE_BYTES`` like a JSONL line. ``NaN``/``Infinity`` are refused as in :func:`read_json`;
    a malformed element names its index and the character position within it.
    """
    import codecs

    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    utf8 = codecs.getincrementaldecoder("utf-8")("strict")
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        state = {"buf": "", "eof": False, "bytes": 0}

        def more(at_least: int = CHUNK_BYTES) -> bool:
            if state["eof"]:
                return False
            raw = f.read(at_least)
            try:
                text = utf8.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                raise DataError(path, f"not UTF-8 text ({e.reason} at byte offset {state['bytes'] + e.start}); "
                                      "save the file as UTF-8") from None
            state["bytes"] += len(raw)
            state["eof"] = not raw
            state["buf"] += text
            return True

        def skip_ws(pos: int) -> int:
            while True:
                buf = state["buf"]
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf) or not more():
                    return pos

        pos = skip_ws(0)
        if state["buf"][pos:pos + 1] != "[":
            raise DataError(path, "expected a JSON list (the file must start with '[')")
        pos, index = skip_ws(pos + 1), 0
        while True:
            buf = state["buf"]
            if buf[pos:pos + 1] == "]":
                if skip_ws(pos + 1) < len(state["buf"]):
                    raise DataError(path, "extra data after the closing ']' of the list")
                return
            if index:
                if buf[pos:pos + 1] != ",":
                    raise DataError(path, f"malformed JSON (expected ',' or ']' after entry {index - 1})",
                                    record=f"index {index}")
                pos = skip_ws(pos + 1)
            while True:
                buf = state["buf"]
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or state["eof"]:
                        break
                except NonJsonConstant as e:
                    raise DataError(path, f"{e} is not JSON; write a string or a finite number",
                                    record=f"index {index}") from None
                except RecursionError:
                    raise DataError(path, f"nested too deeply to parse {WHERE}", record=f"index {index}") from None
                except json.JSONDecodeError as e:
                    if state["eof"]:
                        raise DataError(path, f"malformed JSON ({e.msg} at character {e.pos - pos} of the entry)",
                                        record=f"index {index}") from None
                if len(buf) - pos > MAX_LINE_BYTES:
                    raise DataError(path, f"an entry longer than {MAX_LINE_BYTES} characters {WHERE}",
                                    record=f"index {index}")
                more(max(CHUNK_BYTES, len(buf) - pos))
            check_json_text(buf[pos:end], path, record=f"index {index}")
            yield index, value
            index += 1
            state["buf"] = buf[end:]
            pos = skip_ws(0)
            if pos >= len(state["buf"]):
                raise DataError(path, "malformed JSON (the list is not closed with ']')")
