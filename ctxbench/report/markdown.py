"""Markdown table helpers of the sweep and paper-table reports: the one renderer, ctxbench/core/markdown_table.py."""
from __future__ import annotations

from ctxbench.core.markdown_table import MISSING, fmt, md_table  # noqa: F401 - re-exported
__all__ = ["MISSING", "fmt", "md_table"]
