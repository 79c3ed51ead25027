"""Whether a run's numbers can be trusted: failed LLM calls, invalid structured outputs, failed answers.

:func:`run_health` reads the prediction records the evaluator wrote (so a resumed run counts what
every process did) and compares each failure share with ``max_failed_fraction``:

- failed LLM calls / all LLM calls (answering, plus building memory); a call that returned no text
  (``empty_calls``: a reasoning model out of its token budget, ``content: ""``) counts as failed —
  it answered nothing — and the summary says how many of the failed calls were empty replies;
- invalid structured outputs / structured requests (a JSON reply still invalid after its retries);
- failed questions / questions (every LLM call of the answer failed; never scored, re-answered on resume).

A share above the threshold makes the run ``failed``, and so does any history whose construction
stopped at a failed LLM call (its questions written ``failed`` with ``construction_stopped``:
a half-built memory answers nothing, whatever the threshold; ``stopped_histories``). The evaluator
still writes its results (with ``health``) and then exits non-zero; ``remedy`` says what to do. :func:`health_line` is the part of the final summary line
that is always printed.
"""
from __future__ import annotations

from typing import Any
from ctxbench.metrics.cost import history_outputs

DEFAULT_MAX_FAILED_FRACTION = 0.1


def run_health(records: list[dict[str, Any]], max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION
               ) -> dict[str, Any]:
    calls = failed = empty = 0
    histories: dict[str, dict[str, Any]] = {}
    outputs = history_outputs(records)  # per history: its construction's and its answers'
    for r in records:
        u = r.get("usage") or {}
        calls += int(u.get("answer_calls", 0) or 0)
        failed += int((u.get("extra") or {}).get("failed_calls", 0) or 0)
        empty += int((u.get("extra") or {}).get("empty_calls", 0) or 0)
        h = str(r.get("history_id", ""))
        histories.setdefault(h, r.get("construction") or {})
    for c in histories.values():
        calls += int(c.get("calls", 0) or 0)
        failed += int(c.get("failed_calls", 0) or 0)
        empty += int(c.get("empty_calls", 0) or 0)
    failed += empty
    structured = sum(int(o.get("structured_calls", 0) or 0) for o in outputs.values())
    invalid = sum(int(o.get("invalid_outputs", 0) or 0) for o in outputs.values())
    n_failed_q = sum(1 for r in records if r.get("failed"))
    limit = float(max_failed_fraction)
    reasons = []
    calls_failed = "LLM calls failed" + (f" ({empty} empty replies)" if empty else "")
    for what, bad, total in ((calls_failed, failed, calls), ("structured outputs were invalid", invalid, structured),
                             ("questions failed", n_failed_q, len(records))):
        if total and bad / total > limit:
            reasons.append(f"{bad} of {total} {what}")
    reason = "; ".join(reasons) + f" (more than max_failed_fraction={limit:g})" if reasons else ""
    stopped = stopped_histories(records)
    if stopped:
        reason = "; ".join([f"history {h}: construction stopped at step {s['step']}/{s['steps']}"
                            + (f": {s['error']}" if s.get("error") else " after a failed call")
                            for h, s in stopped.items()] + ([reason] if reason else []))
    return {"llm_calls": calls, "failed_calls": failed, "empty_replies": empty, "structured_calls": structured,
            "invalid_outputs": invalid,
            "questions": len(records), "failed_questions": n_failed_q, "max_failed_fraction": limit,
            "stopped_histories": stopped, "status": "failed" if reason else "ok", "reason": reason,
            "remedy": REMEDY_STOPPED if stopped else REMEDY if reason else ""}


REMEDY = "fix the backend, or raise max_failed_fraction"
REMEDY_STOPPED = ("fix the backend and rerun in the same run folder: construction resumes at the step that failed "
                  "and the history's questions are answered then")


def stopped_histories(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """History id → ``{"step", "steps", ...}`` for each history whose construction stopped at a failed call."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        s = r.get("construction_stopped")
        if r.get("failed") and isinstance(s, dict):
            out.setdefault(str(r.get("history_id", "")), dict(s))
    return out


def add_judge_failures(health: dict[str, Any], failures: dict[str, Any]) -> dict[str, Any]:
    """``health`` with the answers a judge failed to label (results.json ``judge_failures``; each counted
    WRONG in J): ``judge_failed_labels`` / ``judged_answers`` (the worst judge), failed like any other
    share above ``max_failed_fraction``."""
    if not failures:
        return health
    name, worst = max(failures.items(), key=lambda kv: kv[1]["failed"] / max(1, kv[1]["judged"]))
    health["judge_failed_labels"], health["judged_answers"] = worst["failed"], worst["judged"]
    limit = float(health.get("max_failed_fraction", DEFAULT_MAX_FAILED_FRACTION))
    if worst["judged"] and worst["failed"] / worst["judged"] > limit:
        why = (f"{worst['failed']} of {worst['judged']} answers got no label from {name}'s judge (counted wrong; "
               f"more than max_failed_fraction={limit:g})")
        health["reason"] = "; ".join(x for x in (health.get("reason"), why) if x)
        health["status"] = "failed"
        health["remedy"] = health.get("remedy") or REMEDY
    return health


def health_line(h: dict[str, Any]) -> str:
    empty = int(h.get("empty_replies", 0) or 0)
    calls = f"failed calls {h['failed_calls']}/{h['llm_calls']}" + (f" ({empty} empty replies)" if empty else "")
    judged = (f", unlabelled by the judge {h['judge_failed_labels']}/{h['judged_answers']} (counted wrong)"
              if h.get("judge_failed_labels") else "")
    return (f"{calls}, invalid outputs {h['invalid_outputs']}/{h['structured_calls']}, "
            f"failed questions {h['failed_questions']}{judged}")
