"""Errors for bad data: always name the file, the record and the field."""
from __future__ import annotations

from ctxbench.core.errors import CtxbenchError


class DataError(CtxbenchError, ValueError):
    def __init__(self, path: object, message: str, record: object = None, field: str | None = None):
        where = str(path)
        if record is not None:
            where += f", record {record}"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.record, self.field = path, record, field


def first_line(e: BaseException, default: str | None = None) -> str:
    """The first non-empty line of an exception's message (a library's multi-line error, on one line)."""
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), default or type(e).__name__)
