"""The marks a board or paper table puts on a row whose result may bypass memory.

Per run, from its results.json: the ``health.warnings`` the evaluator wrote
(:mod:`ctxbench.metrics.guards`: held context near the whole history, top-k at least the stored items)
and every judge that ``judges`` flags ``lenient`` (read from ``judges`` itself as well, so a run whose
judges were added after its warnings is still marked). Across the rows of one table: a row whose answer
prompt (results.json ``qa_prompt`` name and version) differs from the one most rows used (ties: the
first row's) is marked with both prompts, since a prompt (chain of thought, a longer cap) moves
accuracy as much as a memory does.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from ctxbench.metrics.guards import HELD, LENIENT, TOP_K, lenient_judges

EXPECTED = "expected: whole-history baseline"


def answer_prompt(results: dict[str, Any] | None) -> str | None:
    """``name version`` of the run's answer prompt (results.json ``qa_prompt``), None when not recorded."""
    qa = (results or {}).get("qa_prompt") or {}
    if not qa.get("name"):
        return None
    return f"{qa['name']} {qa['version']}" if qa.get("version") else str(qa["name"])


def run_marks(results: dict[str, Any] | None) -> list[str]:
    """Short marks for one run's row: its warnings, then lenient judges not already among them."""
    results = results or {}
    marks: list[str] = []
    lenient: set[str] = set()
    for w in (results.get("health") or {}).get("warnings") or []:
        kind = w.get("kind")
        if kind == HELD:
            share = w.get("share")
            marks.append(f"held >= {float(w.get('threshold', 0)):.0%} of history"
                         + (f" on {float(share):.0%} of q" if isinstance(share, (int, float)) else "")
                         + (f" ({EXPECTED})" if w.get("expected") else ""))
        elif kind == TOP_K:
            marks.append(f"top-k >= stored items ({len(w.get('histories') or [])}/{w.get('of')} histories)")
        elif kind == LENIENT:
            lenient.add(str(w.get("judge")))
            marks.append(f"lenient judge {w.get('judge')}")
    marks += [f"lenient judge {name}" for name in lenient_judges(results) if name not in lenient]
    return marks


def odd_prompts(prompts: dict[str, str | None]) -> dict[str, str]:
    """Row → its mark, for each row whose answer prompt is not the one most rows used (rows without a
    recorded prompt are left out of the count and unmarked)."""
    known = {row: p for row, p in prompts.items() if p}
    if len(set(known.values())) < 2:
        return {}
    common = Counter(known.values()).most_common(1)[0][0]
    return {row: f"answer prompt {p} (other rows: {common})" for row, p in known.items() if p != common}


def table_marks(rows: dict[str, dict[str, Any] | None]) -> dict[str, list[str]]:
    """Row → every mark (its run's, and an answer prompt that differs from the other rows'), for the
    rows of one table (``rows``: row → its run's results.json, None when it has no run)."""
    odd = odd_prompts({row: answer_prompt(res) for row, res in rows.items() if res})
    return {row: run_marks(res) + ([odd[row]] if row in odd else []) for row, res in rows.items()}


MARKS_NOTE = ("guards = why a row's number may not measure a memory (results.json `health.warnings`, "
              "ctxbench/metrics/guards.py): held >= X of history = the answering model held at least that share "
              f"of the whole history's tokens on some questions ({EXPECTED}: full context, the plain model, a full "
              "KV cache, where it is what the row is for); top-k >= stored items = retrieval returned everything "
              "stored; lenient judge = a judge of its J accepts wrong answers beyond the documented share; answer "
              "prompt = another answer prompt than the other rows'; judged by = its J judged by another model than "
              "the other rows' (the judge model defaults to the run's own llm=).")
