"""``format=longmemeval``: LongMemEval hypothesis files and evaluation logs — listed, not yet readable.

Their rows name LongMemEval question ids, so they are matched against the LongMemEval dataset, which
ctxbench does not load yet (the LongMemEval loader is its own issue). Asking for it says so in one line.
"""
from __future__ import annotations

from pathlib import Path

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register

NOT_YET = ("format=longmemeval is not readable yet: LongMemEval hypothesis files ({question_id, hypothesis} "
           "per line) and their autoeval_label logs are matched against the LongMemEval dataset, and ctxbench "
           "has no LongMemEval loader yet (its own issue); formats readable now: ctxbench, evermemos, mem0, zep")


@register("format", "longmemeval")
class LongMemEvalFormat:
    name = "longmemeval"
    description = "LongMemEval hypotheses + autoeval_label logs (not yet: needs the LongMemEval loader)"
    metrics: list[str] = []
    stored_metrics: dict[str, str] = {}
    available = False

    def read(self, path: Path) -> list:
        raise ConfigError(NOT_YET)
