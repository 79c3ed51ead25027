"""ctxbench's public API: the one module a plug-in imports (docs/plugins.md).

Everything a memory system, a press or trainable method, a dataset, a metric, a judge or an answer
prompt from outside ctxbench's tree needs is here; everything else in the package is private and may
change without notice. :data:`API_VERSION` follows the rule in docs/plugins.md: a MINOR step only adds
names, a MAJOR step may remove or change one, and a name is deprecated (a ``DeprecationWarning`` on
use, the docs saying what replaces it) for at least one MINOR release before a MAJOR step removes it.
A plug-in may declare the versions it supports with ``ctxbench_api = ">=1.0,<2"``
(on its class or module); ctxbench refuses it in one line when this version is not among them.

These are the very classes the built-ins use (tests/test_api.py checks each name is the object the
built-ins derive from), so every built-in exercises the API. Importing this module imports no torch:
the bases that need it (:class:`TrainableMethod`, :class:`TrainingFreeMethod`, :class:`Press` and the
fixed-cache method a press runs in, :class:`FixedKVMethod`) and the
ones that need the stores (:class:`MemorySystem`: records, vector index, structured caller and
resumable ingestion) load on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

from ctxbench.config.setting import Range, between, ge, gt, setting
from ctxbench.core.errors import ConfigError, CtxbenchError
from ctxbench.core.lent import LentBackend
from ctxbench.core.plugins import API_VERSION
from ctxbench.core.registry import register
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage

# name -> module it lives in, imported when the name is first asked for
_LAZY = {
    "MemorySystem": "ctxbench.memory.base",
    "MemorySettings": "ctxbench.config.schemas.memory",
    "TrainableMethod": "ctxbench.methods.base",
    "TrainingFreeMethod": "ctxbench.methods.base",
    "MethodSettings": "ctxbench.config.schemas.method",
    "FixedCacheSettings": "ctxbench.config.schemas.method",
    "Press": "ctxbench.methods.press",
    "LayerKV": "ctxbench.methods.press",
    "SegmentInfo": "ctxbench.methods.press",
    "gather_slots": "ctxbench.methods.press",
    "FixedKVMethod": "ctxbench.methods.kv_cache",
    "Samples": "ctxbench.data.samples",
    "DataError": "ctxbench.data.errors",
    "Metric": "ctxbench.metrics.base",
    "JudgePrompt": "ctxbench.metrics.judges.prompt",
    "AnswerPrompt": "ctxbench.qa.prompt",
}

__all__ = ["API_VERSION", "System", "History", "Session", "Turn", "Question", "Sample", "Prediction", "Usage",
           "LentBackend", "register", "setting", "Range", "ge", "gt", "between", "CtxbenchError", "ConfigError",
           *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ctxbench.api' has no attribute {name!r} (its names: {', '.join(__all__)})")


def __dir__() -> list[str]:
    return sorted(__all__)
