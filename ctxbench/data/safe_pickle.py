"""Load a pickle without letting it run code.

A pickle names callables (``os.system``, ``subprocess.Popen``, any class) that ``pickle.load``
imports and calls. :class:`RestrictedUnpickler` admits only builtin containers and scalars (dict,
list, tuple, set, str, bytes, numbers, bool, None; ``OrderedDict``/``defaultdict`` as mappings);
any other global is refused *before* it is imported, with a DataError naming it.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from .errors import DataError

ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray",
                              "int", "float", "complex", "bool")
} | {("collections", "OrderedDict"), ("collections", "defaultdict")})


class RefusedGlobal(pickle.UnpicklingError):
    def __init__(self, module: str, name: str):
        super().__init__(f"{module}.{name}")
        self.module, self.name = module, name


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """What protocol-2 pickles call (``_codecs.encode(s, "latin1")``) to rebuild ``bytes``; nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is admitted only to rebuild bytes (latin1)")
    return text.encode("latin1")


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        mod = "builtins" if module == "__builtin__" else module  # Python 2 / protocol-2 name
        if (mod, name) in ALLOWED:
            return super().find_class(mod, name)
        if (mod, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise RefusedGlobal(module, name)

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle hook
        raise pickle.UnpicklingError("persistent ids are not admitted")


def safe_loads(data: bytes, source: object = "<bytes>") -> Any:
    """Unpickle ``data`` admitting only builtin containers and scalars."""
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except RefusedGlobal as e:
        raise DataError(source, f"refused to unpickle {e.module}.{e.name}: only builtin containers and "
                                "scalars are admitted (a pickle can run code when loaded)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DataError(source, f"not a readable pickle ({type(e).__name__}: {e})") from None


def safe_load(path: Path) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot be read: {e.strerror}") from None
    return safe_loads(data, path)
