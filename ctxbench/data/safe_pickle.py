"""Load a pickle without letting it run code or build without bound.

A pickle names callables (``os.system``, ``subprocess.Popen``, any class) that ``pickle.load``
imports and calls. :class:`RestrictedUnpickler` admits only builtin containers and scalars (dict,
list, tuple, set, str, bytes, numbers, bool, None; ``OrderedDict``/``defaultdict`` as mappings);
any other global is refused *before* it is imported, with a DataError naming it.

Admitting a constructor is not enough: ``bytearray(2**50)`` is a 27-byte pickle. Each admitted
constructor is a size-checked wrapper (:class:`Builder`) that charges what it would build (an
integer size argument, or the length of the iterable it copies) to one budget per file
(:func:`ctxbench.data.bounds.build_budget` of the file size) and refuses past it; after loading,
:func:`ctxbench.data.bounds.check_built` walks the result iteratively and refuses data nested
deeper than ``MAX_DEPTH`` or larger, counted as a tree, than the same budget.
"""
from __future__ import annotations

import builtins
import collections
import io
import pickle
from pathlib import Path
from typing import Any, Callable

from ctxbench.data.bounds import MAX_FILE_BYTES, WHERE, build_budget, check_built, check_file_size, read_bounded
from ctxbench.data.errors import DataError
from ctxbench.data.records import short_text

ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray",
                              "int", "float", "complex", "bool")
} | {("collections", "OrderedDict"), ("collections", "defaultdict")})


class RefusedGlobal(pickle.UnpicklingError):
    def __init__(self, module: str, name: str):
        super().__init__(f"{module}.{name}")
        self.module, self.name = module, name


class TooLarge(pickle.UnpicklingError):
    """A constructor call that would build past the file's budget."""


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """What protocol-2 pickles call (``_codecs.encode(s, "latin1")``) to rebuild ``bytes``; nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is admitted only to rebuild bytes (latin1)")
    return text.encode("latin1")


SIZED_BY_INT = frozenset({"builtins.bytes", "builtins.bytearray"})  # bytes(n): n zero bytes


def build_cost(name: str, args: tuple[Any, ...]) -> int:
    """What a constructor call builds, at most: its first argument's length, or the size ``bytes(n)`` makes."""
    if not args:
        return 1
    a = args[0]
    if isinstance(a, int) and not isinstance(a, bool):
        return max(abs(a), 1) if name in SIZED_BY_INT else 1
    try:
        return max(len(a), 1)
    except TypeError:
        return 1


class Builder:
    """An admitted constructor, size-checked: ``bytearray(2**50)`` is refused before it allocates."""

    def __init__(self, ctor: Callable[..., Any], name: str, unpickler: "RestrictedUnpickler"):
        self.ctor, self.name, self.unpickler = ctor, name, unpickler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        u = self.unpickler
        u.spent += build_cost(self.name, args)
        if u.spent > u.budget:
            raise TooLarge(f"{self.name}(...) would build more than {u.budget} items and bytes")
        return self.ctor(*args, **kwargs)


class RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, budget: int):
        super().__init__(file)
        self.budget, self.spent = budget, 0

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        mod = "builtins" if module == "__builtin__" else module  # Python 2 / protocol-2 name
        if (mod, name) in ALLOWED:
            ctor = getattr(builtins if mod == "builtins" else collections, name)
            return Builder(ctor, f"{mod}.{name}", self)
        if (mod, name) == ("_codecs", "encode"):
            return Builder(_latin1_bytes, "_codecs.encode", self)
        raise RefusedGlobal(module, name)

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle hook
        raise pickle.UnpicklingError("persistent ids are not admitted")


def _reason(e: BaseException, n: int = 120) -> str:
    """``Type: message`` on one line, cut to ``n`` characters."""
    msg = " ".join(str(e).split())
    msg = msg if len(msg) <= n else msg[: n - 3] + "..."
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def safe_loads(data: bytes, source: object = "<bytes>") -> Any:
    """Unpickle ``data`` admitting only builtin containers and scalars, within the build budget."""
    budget = build_budget(len(data))
    try:
        obj = RestrictedUnpickler(io.BytesIO(data), budget).load()
    except RefusedGlobal as e:
        raise DataError(source, f"refused to unpickle {short_text(f'{e.module}.{e.name}', 80)}: only builtin containers and "
                                "scalars are admitted (a pickle can run code when loaded)") from None
    except TooLarge as e:
        raise DataError(source, f"refused: {e}, too many for a {len(data)}-byte file {WHERE}") from None
    except MemoryError:
        raise DataError(source, "refused: it declares an object larger than the memory available") from None
    except RecursionError:
        raise DataError(source, f"not a readable pickle (nested too deeply to unpickle) {WHERE}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            OverflowError) as e:
        raise DataError(source, f"not a readable pickle ({_reason(e)})") from None
    check_built(obj, source, budget)
    return obj


def safe_load(path: Path) -> Any:
    check_file_size(path, MAX_FILE_BYTES)
    return safe_loads(read_bounded(path, MAX_FILE_BYTES), path)
