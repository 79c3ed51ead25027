"""docs/config.md is generated from the schemas; a stale copy fails here (rewrite it: python -m ctxbench.config.docs)."""
from __future__ import annotations

from ctxbench.config.docs import DOC, render


def test_docs_config_is_current():
    assert DOC.read_text() == render(), "docs/config.md is stale: run python -m ctxbench.config.docs"


def test_docs_list_every_key_with_its_bound():
    text = render()
    assert "| `trainer.max_steps` | int | `15` | >= 0 |" in text
    assert "one of cosine, linear, constant" in text and "### `method` schema `lococo`" in text
