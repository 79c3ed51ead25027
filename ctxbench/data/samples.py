"""``Samples``: a ``list[Sample]`` that also carries what its loader counted.

Loaders return it so odd-but-valid records are counted where they are handled (``quirks``) and a
stats command can report them; every consumer can keep treating it as a plain list.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Iterable

from ctxbench.core.types import Sample

log = logging.getLogger(__name__)


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
