"""Resource bounds on untrusted data files: size, nesting depth, string length, built size.

A dataset or predictions file is read before anything about it is known, so each reader checks,
cheaply and without recursion, that the file cannot make it allocate without limit or recurse
past Python's stack:

- only regular files are read (a device, FIFO, socket or folder is refused: ``open_regular`` opens
  non-blocking and checks the type after opening), and a read stops at its bound plus one byte
  (``read_bounded``), since a special file reports size 0;
- ``MAX_FILE_BYTES`` (2 GiB): a JSON document or a pickle is read whole; a larger one is refused;
- ``MAX_LINE_BYTES`` (256 MiB): one JSONL line (JSONL files are streamed, so only a line is bounded);
- ``MAX_DEPTH`` (64): lists/objects nested deeper are refused (every real file nests < 10 levels);
- ``MAX_STRING_CHARS`` (16 Mi): one JSON string (the longest Pile documents are a few Mi);
- ``MAX_ANSWER_CHARS`` (1 Mi): one answer or prediction in a predictions file;
- a pickle's *built size* (every string's length plus every container's entries, counted as a
  tree, so shared or self-referencing objects count each time they are reached) is capped at
  ``BUILD_BUDGET_MIN`` + ``BUILD_BUDGET_PER_BYTE`` × the file size.

The limits are module constants (``ctxbench.data.bounds``); every refusal names the file, the
limit and this module, so a user with a genuinely larger file knows what to change.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError

MAX_FILE_BYTES = 2 * 1024 ** 3
MAX_LINE_BYTES = 256 * 1024 ** 2
MAX_DEPTH = 64
MAX_STRING_CHARS = 16 * 1024 ** 2
MAX_ANSWER_CHARS = 1024 ** 2
BUILD_BUDGET_MIN = 1024 ** 2
BUILD_BUDGET_PER_BYTE = 16
WHERE = "(limit set in ctxbench.data.bounds)"

# A JSON string (escapes included), a bracket, or a lone quote (an unterminated string: stop, the
# JSON parser reports it).
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|"', re.S)


def check_file_size(path: Path, limit: int = MAX_FILE_BYTES) -> int:
    """The file's size in bytes; DataError if it cannot be read, is not a regular file or is over ``limit``."""
    try:
        st = Path(path).stat()
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None
    _check_regular(path, st.st_mode)
    if st.st_size > limit:
        raise DataError(path, f"is {st.st_size} bytes, over the {limit}-byte limit for a data file {WHERE}")
    return st.st_size


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _check_regular(path: object, mode: int) -> None:
    """A device, FIFO or socket reports size 0 and may never end (or block forever): only files are read."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise DataError(path, f"is {kind}, not a regular file; give a data file")


def open_regular(path: Path) -> int:
    """A file descriptor of ``path`` opened for reading, checked to be a regular file *after* opening
    (``O_NONBLOCK``: opening a FIFO does not wait for a writer); DataError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None
    try:
        _check_regular(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file, reading at most ``limit`` + 1 (a file that reports a small size and
    keeps growing, a /proc file, is bounded by what is read, not by what it reports); DataError past it."""
    fd = open_regular(path)
    chunks, total = [], 0
    try:
        while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise DataError(path, f"is over the {limit}-byte limit for a data file {WHERE}")
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


CHUNK = 16 * 1024 ** 2


def decode_utf8(raw: bytes, path: object, record: object = None, offset: int = 0) -> str:
    """``raw`` as UTF-8 text; DataError naming the byte offset (from the file start) of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, f"not UTF-8 text ({e.reason} at byte offset {offset + e.start}); "
                              "save the file as UTF-8", record=record) from None


def check_json_text(text: str, path: object, record: object = None) -> None:
    """Nesting depth and string lengths of JSON ``text``, scanned iteratively before parsing."""
    if text.count("[") + text.count("{") <= MAX_DEPTH and len(text) <= MAX_STRING_CHARS:
        return
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise DataError(path, f"nested deeper than {MAX_DEPTH} levels (at character {m.start()}) {WHERE}",
                                record=record)
        elif tok in "]}":
            depth -= 1
        elif tok == '"':
            return  # unterminated string: the parser names it
        elif len(tok) - 2 > MAX_STRING_CHARS:
            raise DataError(path, f"a string of {len(tok) - 2} characters (at character {m.start()}), over the "
                                  f"{MAX_STRING_CHARS}-character limit {WHERE}", record=record)


def check_built(obj: Any, path: object, budget: int) -> None:
    """Depth and built size of loaded data (pickles), walked iteratively; DataError past either bound.

    Shared objects count each time they are reached (the loaders walk them that many times) and a
    self-referencing container is refused as too deep.
    """
    total = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, (str, bytes, bytearray)):
            total += len(o)
        elif isinstance(o, (dict, list, tuple, set, frozenset)):
            if depth > MAX_DEPTH:
                raise DataError(path, f"data nested deeper than {MAX_DEPTH} levels {WHERE}")
            total += len(o)
            items = [x for kv in o.items() for x in kv] if isinstance(o, dict) else o
            stack.extend((x, depth + 1) for x in items if isinstance(x, (str, bytes, bytearray, dict, list,
                                                                           tuple, set, frozenset)))
        else:
            total += 1
        if total > budget:
            raise DataError(path, f"builds more than {budget} items and characters (shared or repeated objects "
                                  f"counted each time), too many for its size {WHERE}")


def build_budget(file_bytes: int) -> int:
    """The built-size budget for a pickle of ``file_bytes`` bytes."""
    return BUILD_BUDGET_MIN + BUILD_BUDGET_PER_BYTE * file_bytes
