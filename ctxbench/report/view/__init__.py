"""``python -m ctxbench view RUN [RUN_B] [out=FILE]``: a run (or two) as one self-contained HTML page.

    python -m ctxbench view outputs/eval/<run>                   # → <run>/view.html
    python -m ctxbench view RUN_A RUN_B out=a_vs_b.html           # side by side, B − A paired, disagreements

The page needs no network and no server (open it from disk). ``payload.py`` reads a run folder,
``pair.py`` pairs two runs, ``page.py`` puts the payload into ``template.html``. It imports no torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbench.report.runs import ReportError

OUT_NAME = "view.html"


def build(runs: list[str], contexts: bool = False, max_context_chars: int = 600, threshold: float = 0.3,
          page_size: int = 100) -> dict[str, Any]:
    """The page's payload for one or two run folders."""
    from ctxbench.report.view.pair import pair_payload
    from ctxbench.report.view.payload import run_payload

    loaded = [run_payload(r, contexts=contexts, max_context_chars=max_context_chars) for r in runs]
    payload: dict[str, Any] = {"runs": loaded, "page_size": page_size}
    if len(loaded) == 2:
        if loaded[0]["name"] == loaded[1]["name"]:
            loaded[1]["name"] += " (B)"
        payload["pair"] = pair_payload(loaded[0], loaded[1], threshold=threshold)
    return payload


def write_view(runs: list[str], out: str | Path | None = None, **kw: Any) -> Path:
    """Write the page; ``out`` defaults to ``<first run>/view.html`` (``view_vs_<B>.html`` for two runs)."""
    from ctxbench.report.view.page import render
    from ctxbench.runs.results import atomic_write_text

    payload = build(runs, **kw)
    first = Path(payload["runs"][0]["header"]["folder"])
    if out:
        path = Path(out)
    else:
        path = first / (OUT_NAME if len(runs) == 1 else f"view_vs_{Path(payload['runs'][1]['header']['folder']).name}.html")
    title = " vs ".join(r["name"] for r in payload["runs"]) + " · ctxbench view"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render(payload, title))
    return path


def main(cfg: Any) -> Path:
    runs = [str(r) for r in (cfg.run, cfg.run_b) if r]
    if not runs:
        raise ReportError("view: name a run folder: python -m ctxbench view RUN [RUN_B] [out=FILE]")
    path = write_view(runs, cfg.out, contexts=bool(cfg.contexts), max_context_chars=int(cfg.max_context_chars),
                      threshold=float(cfg.threshold), page_size=int(cfg.page_size))
    size = path.stat().st_size
    print(f"view: wrote {path} ({size / 1e6:.2f} MB; open it in a browser, nothing is fetched)")
    return path
