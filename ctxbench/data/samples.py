"""``Samples``: a ``list[Sample]`` that also carries what its loader counted.

Loaders return it so odd-but-valid records are counted where they are handled (``quirks``) and a
stats command can report them; every consumer can keep treating it as a plain list.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Iterable

from ctxbench.core.types import Sample
from ctxbench.data.errors import DataError

log = logging.getLogger(__name__)


def keep_histories(samples: list[Sample], wanted: Iterable[Any], source: str, field: str, what: str) -> list[Sample]:
    """The samples whose history id is in ``wanted`` (a dataset's ``conversations=`` / ``questions=``);
    an id the data does not have fails in one line naming ``field`` (the ids available listed when few)."""
    ids = [str(w) for w in wanted]
    have = {s.history.id for s in samples}
    missing = [i for i in ids if i not in have]
    if missing:
        shown = f"{missing[:5]}{' ...' if len(missing) > 5 else ''}"
        raise DataError(source, f"unknown {what} {shown}" + (f"; available: {sorted(have)}" if len(have) <= 20 else ""),
                        field=field)
    keep = set(ids)
    return [s for s in samples if s.history.id in keep]


class Samples(list):
    """A list of :class:`Sample` plus ``source`` (file or hub id), ``quirks`` (name → count) and
    ``errata`` (``dataset.errata``: the corrected gold, :class:`ctxbench.data.errata.Errata`, or None)."""

    def __init__(self, items: Iterable[Sample] = (), source: str = "", quirks: Counter | dict | None = None,
                 errata: Any = None):
        super().__init__(items)
        self.source = source
        self.quirks: Counter = Counter(quirks or {})
        self.errata = errata

    def derive(self, items: Iterable[Sample]) -> "Samples":
        """A subset that keeps the source, the (whole-file) quirk counts and the errata."""
        return Samples(items, self.source, self.quirks, self.errata)

    def log_quirks(self, dataset: str) -> None:
        found = {k: v for k, v in self.quirks.items() if v}
        if found:
            log.info("%s (%s): handled odd records: %s", dataset, self.source,
                     ", ".join(f"{k}={v}" for k, v in sorted(found.items())))
