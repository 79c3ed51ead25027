"""The viewer's payload → one self-contained HTML file (the template ``template.html``, inline CSS and JS,
the payload embedded as JSON in a ``<script type="application/json">``; nothing is fetched)."""
from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

MARK = "/*PAYLOAD*/"
TITLE = "<!--TITLE-->"


def _finite(obj: Any) -> Any:
    """NaN and infinities as null (JSON.parse reads no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def embed_json(payload: Any) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the JS line separators escaped."""
    text = json.dumps(_finite(payload), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def template() -> str:
    return resources.files("ctxbench.report.view").joinpath("template.html").read_text(encoding="utf-8")


def render(payload: dict[str, Any], title: str) -> str:
    """The page: the template with the payload and the title put in."""
    import html

    page = template()
    assert MARK in page and TITLE in page, "ctxbench/report/view/template.html lost its placeholders"
    return page.replace(TITLE, html.escape(title)).replace(MARK, embed_json(payload))
