"""Cost aggregation over prediction records written by the evaluator.

Each record carries ``usage`` (the :class:`~ctxbench.core.types.Usage` of that answer, as counted by
the system), ``history_id``, ``answer_seconds``, ``outputs`` (the structured replies its answer asked
for) and ``construction`` (what ingesting its history cost: tokens, calls, seconds, memory footprint,
``outputs`` of the build; identical for the questions of one history).
Construction is amortised per question: a history's construction cost is divided by the number of
its questions answered.

Accounting rules every system follows (tests/test_cost_context_tokens.py, tests/test_held_axis.py):
``held_per_question`` is the one budget axis across paradigms — what the answering model holds when it
answers (:attr:`~ctxbench.core.types.Usage.held`): ``text``, the tokens of history or memory text in
the answer prompt as the backend sent it (after any trimming; no instructions, question or speaker
introduction; ``no_context`` holds none: 0), ``kv_slots``, the KV positions per layer of compressed
history the answer attends to (presses, CCM, LoCoCo, kvpress), ``soft_slots``, ICAE's memory slot
embeddings; ``total`` is their sum and ``kv_bytes`` the bytes of KV held. Records written before
``ctxbench-cost-4`` carry no held counts: the block is then ``null`` with ``held_missing`` saying so.
``tokens_per_question`` is a separate axis, what answering costs: ``answer_prompt`` counts the text
tokens of the answer prompt (held text included; KV and soft slots are not tokens fed). It keeps each
consumer apart (``ctxbench-cost-5``): ``read`` / ``written``, the answering model's prompt and completion
tokens (= ``answer_prompt`` / ``answer_completion``); ``construction``, building the memory, amortised
over the history's questions (its prompt and completion parts beside it); ``judging``, the judge's
calls for the question (records' ``judge_usage``, :func:`judge_usage`; ``judging_per_question`` has its
parts, null when nothing was judged); ``total`` = read + written + construction + judging. The footprint (``memory_items`` /
``memory_tokens``) counts everything the system holds for the history, state included (ReadAgent's
gists beside its pages). ``latency_s.search`` is over the answers that time their retrieval apart
(``usage.extra.search_seconds``: the memory systems' retrieve step, Mem0's Table 2 "search"); the
``answer`` latency is the whole answer (retrieval and generation: Table 2's "total").

Latency counts real calls only: an answer whose LLM calls were all served by the call cache
(``usage.extra.cached_calls`` = its calls; a lookup, 0.01 s, beside a model's 80 s) and a history whose
construction calls all were (``construction.cached_calls``) are left out of the percentiles, and each
latency block says how many were left out and their share (``cached``, ``cached_share``). An answer
without LLM calls (a method decoding with its own model) is always real.
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.types import HELD_AXIS, HELD_FIELDS, Usage
from ctxbench.data.errors import DataError
from ctxbench.metrics.structured import add_outputs, merge_reports

# 3: latency_s.search; 4: held_per_question (tokens_per_question.context gone), outputs per question,
# construction.outputs per history; 5: tokens_per_question read / written / construction / judging apart,
# total counts judging too
COST_VERSION = "ctxbench-cost-5"
JUDGE_PHASE, JUDGE_USAGE = "judge", "judge_usage"


def judge_usage(scope: Any) -> dict[str, int] | None:
    """``{"prompt_tokens", "completion_tokens", "calls"}`` of the judge calls (phase ``judge``, on any
    backend: a judge LLM of its own or the evaluated system's) counted in one
    :func:`~ctxbench.llm.scope.call_scope` (judging one answer); None when there were none. A call
    replayed from the call cache counts what it cost when it was made: what judging this answer costs."""
    counts = [c for (_, phase), c in scope.counts.items() if phase == JUDGE_PHASE]
    calls = sum(c.calls for c in counts)
    if not calls:
        return None
    return {"prompt_tokens": sum(c.prompt_tokens for c in counts),
            "completion_tokens": sum(c.completion_tokens for c in counts), "calls": calls}


def judging_per_question(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean judging cost per question over ``records`` (scored: their ``judge_usage``), questions never
    judged counting 0 (an adversarial question LoCoMo's judge skips); None when nothing was judged."""
    used = [r.get(JUDGE_USAGE) or {} for r in records]
    if not records or not any(used):
        return None
    n = len(records)

    def mean(key: str) -> float:
        return sum(float(u.get(key, 0) or 0) for u in used) / n

    p, c = mean("prompt_tokens"), mean("completion_tokens")
    return {"prompt": _r(p, 2), "completion": _r(c, 2), "total": _r(p + c, 2), "calls": _r(mean("calls"), 3),
            "judged": sum(1 for u in used if u)}


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def history_outputs(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each history's structured-reply counts: what building it asked for (``construction.outputs``,
    carried once per history) plus each answered question's own (the record's ``outputs``).

    Records written before ``ctxbench-cost-4`` carry no ``construction.outputs``: their ``outputs``
    are the history's cumulative counts snapshotted when a question was answered, read from the latest
    snapshot (the one with the most structured calls: counts only grow). A history mixing both (a
    run resumed across the change) cannot be added up and is refused."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(str(r.get("history_id", "")), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for h, recs in by.items():
        own = ["outputs" in (r.get("construction") or {}) for r in recs]
        if all(own):
            out[h] = add_outputs([recs[0]["construction"]["outputs"] or {}] + [r.get("outputs") or {} for r in recs])
        elif not any(own):
            out[h] = _latest_snapshot(recs)
        else:
            raise DataError("predictions.jsonl", f"history {h!r} mixes per-question output counts with cumulative "
                            "ones written before ctxbench-cost-4 (a run resumed across versions): answer it again "
                            "in a fresh run folder", record=h, field="outputs")
    return out


def _latest_snapshot(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The cumulative ``outputs`` with the most structured calls (ties: the later record)."""
    latest: dict[str, Any] = {}
    for r in records:
        o = r.get("outputs") or {}
        if int(o.get("structured_calls", 0) or 0) >= int(latest.get("structured_calls", 0) or 0):
            latest = o
    return latest


def held_per_question(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean held context per question (:data:`~ctxbench.core.types.HELD_AXIS`), or None when some record
    predates the held counts (a run evaluated before ``ctxbench-cost-4``)."""
    usages = [r.get("usage") or {} for r in records]
    if not usages or any(not all(k in u for k in HELD_FIELDS) for u in usages):
        return None
    held = [Usage.from_dict(u) for u in usages]
    n = len(held)
    return {"axis": HELD_AXIS,
            "text": _r(sum(u.held_text for u in held) / n, 2),
            "kv_slots": _r(sum(u.held_kv_slots for u in held) / n, 2),
            "soft_slots": _r(sum(u.held_soft_slots for u in held) / n, 2),
            "total": _r(sum(u.held for u in held) / n, 2),
            "kv_bytes": _r(sum(u.kv_bytes for u in held) / n, 1)}


def served_from_cache(usage: dict[str, Any]) -> bool:
    """An answer whose LLM calls were all served by the call cache (``usage.extra.cached_calls``)."""
    calls = int(usage.get("answer_calls", 0) or 0)
    cached = int((usage.get("extra") or {}).get("cached_calls", 0) or 0)
    return calls > 0 and cached >= calls


def construction_from_cache(construction: dict[str, Any]) -> bool:
    """A history whose construction calls were all served by the call cache."""
    calls = int(construction.get("calls", 0) or 0)
    return calls > 0 and int(construction.get("cached_calls", 0) or 0) >= calls


def aggregate_cost(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The cost block of results.json over every record (failed ones too: they cost what they cost);
    judging is read from the records' ``judge_usage``, which scored records carry."""
    n = len(records)
    if n == 0:
        return {"version": COST_VERSION, "n_questions": 0}
    histories: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for r in records:
        h = str(r.get("history_id", ""))
        counts[h] = counts.get(h, 0) + 1
        histories.setdefault(h, r.get("construction") or {})

    def usage(r: dict[str, Any], key: str) -> float:
        return float((r.get("usage") or {}).get(key, 0) or 0)

    def csum(key: str) -> float:
        return sum(float(c.get(key, 0) or 0) for c in histories.values())

    ans_prompt = sum(usage(r, "answer_prompt_tokens") for r in records) / n
    ans_comp = sum(usage(r, "answer_completion_tokens") for r in records) / n
    ans_calls = sum(usage(r, "answer_calls") for r in records) / n
    con_prompt, con_comp = csum("prompt_tokens") / n, csum("completion_tokens") / n
    con_calls = csum("calls") / n
    answer_cached = [served_from_cache(r.get("usage") or {}) for r in records]
    answer_lat = [float(r.get("answer_seconds", 0.0)) for r, c in zip(records, answer_cached) if not c]
    search_lat = [float(x) for x in (((r.get("usage") or {}).get("extra") or {}).get("search_seconds")
                                     for r in records) if isinstance(x, (int, float)) and not isinstance(x, bool)]
    ingest_cached = [construction_from_cache(c) for c in histories.values()]
    ingest_lat = [float(c.get("seconds", 0.0)) for c, hit in zip(histories.values(), ingest_cached) if not hit]
    nh = len(histories)
    held = held_per_question(records)
    judging = judging_per_question(records)
    judge_tokens = float((judging or {}).get("total") or 0.0)
    return {
        "version": COST_VERSION,
        "n_questions": n,
        "n_histories": nh,
        "held_per_question": held,
        **({} if held is not None else {"held_missing": "records predate held counts (ctxbench-cost-4): "
                                                         "re-evaluate to measure what the answering model holds"}),
        "tokens_per_question": {
            "read": _r(ans_prompt, 2),  # what the answering model read (its prompts) ...
            "written": _r(ans_comp, 2),  # ... and wrote
            "answer_prompt": _r(ans_prompt, 2),
            "answer_completion": _r(ans_comp, 2),
            "construction": _r(con_prompt + con_comp, 2),
            "construction_prompt_amortised": _r(con_prompt, 2),
            "construction_completion_amortised": _r(con_comp, 2),
            "judging": _r(judge_tokens, 2),
            "total": _r(ans_prompt + ans_comp + con_prompt + con_comp + judge_tokens, 2),
        },
        "judging_per_question": judging,
        "llm_calls_per_question": {
            "answer": _r(ans_calls, 3), "construction_amortised": _r(con_calls, 3),
            "total": _r(ans_calls + con_calls, 3)},
        "llm_calls_total": {"answer": int(sum(usage(r, "answer_calls") for r in records)),
                            "construction": int(csum("calls"))},
        "failed_calls": int(sum(float((r.get("usage") or {}).get("extra", {}).get("failed_calls", 0) or 0)
                                for r in records) + csum("failed_calls")),
        "latency_s": {
            "ingest": {"p50": _r(percentile(ingest_lat, 50)), "p95": _r(percentile(ingest_lat, 95)),
                       "total": _r(sum(ingest_lat), 3), "n": len(ingest_lat), "cached": sum(ingest_cached),
                       "cached_share": _r(sum(ingest_cached) / nh, 4) if nh else None},
            "answer": {"p50": _r(percentile(answer_lat, 50)), "p95": _r(percentile(answer_lat, 95)),
                       "mean": _r(sum(answer_lat) / len(answer_lat)) if answer_lat else None, "n": len(answer_lat),
                       "cached": sum(answer_cached), "cached_share": _r(sum(answer_cached) / n, 4),
                       "over": "real calls only: answers served wholly by the call cache left out"},
            "search": {"p50": _r(percentile(search_lat, 50)), "p95": _r(percentile(search_lat, 95)),
                       "n": len(search_lat)},
        },
        "structured_output": merge_reports([o.get("structured_output") or {}
                                            for o in history_outputs(records).values()]),
        "memory_per_history": {
            "items": _r(csum("memory_items") / nh, 2),
            "tokens": _r(csum("memory_tokens") / nh, 2),
            "kv_bytes": _r(csum("kv_bytes") / nh, 1),
        },
    }
