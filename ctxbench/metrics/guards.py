"""Guards against results that bypass memory: results.json ``health.warnings``.

A warning never fails a run (that is :mod:`.health`'s ``status``); it says why a number may not
measure a memory, and the board and paper tables mark the row (:mod:`ctxbench.report.guards`). Each
warning is ``{"kind", "message", "expected", ...}`` (``expected``: the system is meant to trip it, a
whole-history baseline, labelled as such and not as a fault); :func:`warning_lines` prints one
console line each. Kinds:

- ``held_context``: the answering model held at least ``bypass_held_share`` (eval config, default
  0.8) of the whole history's tokens on some question: held context (``Usage.held``: text tokens +
  KV slots + soft slots) over ``construction.history_tokens`` (the history rendered as the full-context
  baseline renders it, counted by the run's backend). ``health.held_share`` reports, over the
  questions measured, the share at or over the threshold and the median ratio, warning or not.
  ``full_context``, ``method=lm`` and ``full_cache`` (``System.whole_history_baseline``) are expected
  to trip it when the history fits their window.
- ``top_k``: some answer of a history asked its store for at least as many items as the store held
  (``usage.extra.retrieval``, :mod:`ctxbench.memory.stores.retrieval_notes`): retrieval returned
  everything stored. Reported per history.
- ``lenient_judge``: results.json ``judges`` (the judge panel: ``{name: {..., "lenient": bool,
  "false_accept": rate}}``) names a judge flagged lenient; its J counts wrong answers as right.

An answer prompt that differs from the other rows of a table is a table-level guard: it needs the
other rows (:mod:`ctxbench.report.guards`).
"""
from __future__ import annotations

import statistics
from typing import Any

from ctxbench.core.types import Usage

HELD, TOP_K, LENIENT = "held_context", "top_k", "lenient_judge"


def default_held_share() -> float:
    """``bypass_held_share``'s default, from the eval schema (the one place it is written)."""
    from ctxbench.config.schemas import command_schema
    from ctxbench.config.setting import defaults

    return float(defaults(command_schema("eval"))["bypass_held_share"])


def held_ratios(records: list[dict[str, Any]]) -> list[float]:
    """Per answered question with a history token count: held context / the history's tokens."""
    out = []
    for r in records:
        total = (r.get("construction") or {}).get("history_tokens")
        u = r.get("usage") or {}
        if r.get("failed") or not isinstance(total, (int, float)) or total <= 0 or "held_text" not in u:
            continue
        out.append(Usage.from_dict(u).held / float(total))
    return out


def held_share(records: list[dict[str, Any]], threshold: float) -> dict[str, Any] | None:
    """``{"threshold", "questions", "over", "share", "median_ratio"}``; None when no question was measured
    (records without ``history_tokens``: written before the guard, or a system without a token counter)."""
    ratios = held_ratios(records)
    if not ratios:
        return None
    over = sum(1 for x in ratios if x >= threshold)
    return {"threshold": threshold, "questions": len(ratios), "over": over,
            "share": round(over / len(ratios), 4), "median_ratio": round(statistics.median(ratios), 4)}


def exhaustive_histories(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """History id → the first retrieval of its answers that asked for at least everything stored."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        ret = ((r.get("usage") or {}).get("extra") or {}).get("retrieval") or {}
        h = str(r.get("history_id", ""))
        if int(ret.get("exhaustive", 0) or 0) > 0 and h not in out:
            out[h] = {"k": ret.get("k"), "stored": ret.get("stored")}
    return out


def lenient_judges(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The judges of results.json ``judges`` flagged ``lenient: true``."""
    judges = results.get("judges")
    if not isinstance(judges, dict):
        return {}
    return {str(name): j for name, j in judges.items() if isinstance(j, dict) and j.get("lenient") is True}


def run_warnings(records: list[dict[str, Any]], results: dict[str, Any], threshold: float | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(``health.warnings``, ``health.held_share``) of a run: its records and the results it writes
    (``judges``; ``whole_history_baseline``: the system is a whole-history baseline; ``system``)."""
    threshold = default_held_share() if threshold is None else float(threshold)
    warnings: list[dict[str, Any]] = []
    baseline = bool(results.get("whole_history_baseline"))
    held = held_share(records, threshold)
    if held and held["over"]:
        msg = (f"held context >= {threshold:.0%} of the history's tokens on {held['over']} of {held['questions']} "
               f"questions ({held['share']:.0%}; median ratio {held['median_ratio']:.2f})")
        msg += (f": expected, {results.get('system') or 'the system'} is a whole-history baseline" if baseline
                else ": these answers read (nearly) the whole history, not a memory")
        warnings.append({"kind": HELD, "message": msg, "expected": baseline, **held})
    full = exhaustive_histories(records)
    if full:
        n_hist = len({str(r.get("history_id", "")) for r in records})
        h, first = next(iter(full.items()))
        warnings.append({"kind": TOP_K, "expected": False, "histories": sorted(full), "of": n_hist,
                         "message": f"top-k >= stored items in {len(full)} of {n_hist} histories (e.g. {h}: "
                                    f"k={first['k']} of {first['stored']} stored): retrieval returned everything "
                                    "the system stored"})
    for name, j in lenient_judges(results).items():
        fa = j.get("false_accept")
        rate = f" (false-accept rate {fa:.0%})" if isinstance(fa, (int, float)) and not isinstance(fa, bool) else ""
        warnings.append({"kind": LENIENT, "expected": False, "judge": name, "false_accept": fa,
                         "message": f"judge {name} is flagged lenient{rate}: its J counts wrong answers as right"})
    return warnings, held


def warning_lines(warnings: list[dict[str, Any]]) -> list[str]:
    """One console line per warning (``expected:`` for one the system is meant to trip)."""
    return [("expected: " if w.get("expected") else "warning: ") + str(w.get("message", "")) for w in warnings]
