"""A board's columns: metrics by their registered name (any ``ctxbench.core.registry.names("metric")``,
a plug-in's included; results.json ``overall.<name>`` ± ``<name>_stderr``) and the cost and latency
columns below. A board without ``columns`` shows :data:`DEFAULT_COLUMNS` (J and session R@5 only when
some row has them). A metric a row's run did not measure shows ``—`` with a footnote.

A column is a name or ``{column: NAME, label: TEXT}``. The first three columns (system, paradigm,
n) and the last two (Pareto, when ``held`` is shown; guards) are always there.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ctxbench.report.markdown import MISSING
from ctxbench.report.runs import ReportError

RECALL_K = 5  # the board's evidence-recall column: session recall_any@5 (results.json evidence_recall)
HELD_UNKNOWN = "not counted (pre cost-4)"
METRIC_LABELS = {"f1": "F1", "bleu1": "BLEU-1", "rougeL": "ROUGE-L", "llm_judge": "J"}


def _tok(v: float | None) -> str:
    return MISSING if v is None else f"{v:,.0f}"


def _cached(share: float | None) -> str:
    """`` (40% cached)`` beside an answer latency when some answers were served by the call cache (left out
    of the latency, which is over real calls only)."""
    return f" ({share:.0%} cached)" if share else ""


def _sec(v: float | None) -> str:
    return MISSING if v is None else f"{v:.2f}"


def _bytes(v: float | None) -> str:
    if not v:
        return MISSING
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def _memory(r: dict[str, Any]) -> str:
    if r.get("kv_bytes"):
        return f"{_bytes(r['kv_bytes'])} KV"
    items, toks = r.get("memory_items"), r.get("memory_tokens")
    if not items and not toks:
        return MISSING
    return f"{items or 0:,.0f} items / {toks or 0:,.0f} tok"


def _held(r: dict[str, Any]) -> str:
    return HELD_UNKNOWN if r.get("held") is None else _tok(r["held"])


def _recall(r: dict[str, Any]) -> str:
    return MISSING if r.get("session_recall") is None else f"{r['session_recall']:.3f}"


#: cost / latency / retrieval columns: name → (header, cell of a row record, its note under the table)
COST_COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any]], str], str]] = {
    "session_recall": (f"session R@{RECALL_K}", _recall,
                       f"session R@{RECALL_K} = evidence recall: the share of questions whose evidence session is "
                       f"among the first {RECALL_K} distinct sessions the system retrieved (— = retrieves nothing)."),
    "held": ("held / q", _held,
             "held / q = what the answering model holds when it answers, per question: tokens of history or memory "
             "text in the prompt as sent (after any trimming) + KV slots per layer of compressed history + soft "
             f"memory slots (ICAE); {HELD_UNKNOWN}: the run was evaluated before held counts existed (re-evaluate "
             "it); such rows are off the front and the plot."),
    "read": ("read / q", lambda r: _tok(r.get("read_tokens")),
             "read / q and written / q = the answering model's prompt and completion tokens per question (text "
             "tokens fed; KV and soft slots are held, not fed)."),
    "written": ("written / q", lambda r: _tok(r.get("written_tokens")), ""),
    "construction": ("construction / q", lambda r: _tok(r.get("construction_tokens")),
                     "construction / q = the LLM tokens spent building the memory, divided by the questions asked of it."),
    "judging": ("judging / q", lambda r: _tok(r.get("judging_tokens")),
                "judging / q = the judge's prompt + completion tokens per question (— = not counted: a run before "
                "ctxbench-cost-5)."),
    "tokens": ("tokens / q", lambda r: _tok(r.get("tokens_per_question")),
               "tokens / q = read + written + construction + judging tokens per question."),
    "memory": ("memory per history", _memory,
               "memory per history = the KV bytes a compression method holds between ingest and answer, or a memory "
               "system's items and their tokens."),
    "answer_p50_s": ("answer p50 s", lambda r: _sec(r.get("answer_p50_s")) + _cached(r.get("answer_cached_share")),
                     "answer p50 s = over the answers that called a model (answers served wholly by the call cache "
                     "left out; their share beside it, \"cached\")."),
    "ingest_s": ("ingest s", lambda r: _sec(r.get("ingest_s")), ""),
}
DEFAULT_COLUMNS = ("f1", "bleu1", "rougeL", "llm_judge", "session_recall", "held", "read", "written",
                   "construction", "judging", "memory", "answer_p50_s", "ingest_s")
SHOWN_WHEN_PRESENT = ("llm_judge", "session_recall")  # default columns hidden when no row has them


@dataclass(frozen=True)
class Column:
    name: str
    label: str
    metric: bool           # a registered metric (results.json overall), else a COST_COLUMNS entry
    always: bool = True    # False: a default column shown only when some row has it


def parse_columns(value: Any, path: Path) -> list[Column]:
    """A board's ``columns`` (None: the defaults), each checked against the metric registry and
    :data:`COST_COLUMNS`; a wrong one is a ReportError naming the file and the column."""
    if value is None:
        return [replace(_column(name, None, path, "columns (default)"), always=name not in SHOWN_WHEN_PRESENT)
                for name in DEFAULT_COLUMNS]
    if not isinstance(value, list) or not value:
        raise ReportError(f"{path}: field 'columns': a list of metric or cost column names, not {value!r}")
    out = []
    for i, item in enumerate(value):
        where = f"columns[{i}]"
        if isinstance(item, dict):
            unknown = set(item) - {"column", "label"}
            if unknown or not isinstance(item.get("column"), str):
                raise ReportError(f"{path}: {where}: a name or {{column: NAME, label: TEXT}}, not {item!r}")
            name, label = item["column"], item.get("label")
        elif isinstance(item, str):
            name, label = item, None
        else:
            raise ReportError(f"{path}: {where}: a name or {{column: NAME, label: TEXT}}, not {item!r}")
        out.append(_column(name, label, path, where))
    return out


def _column(name: str, label: Any, path: Path, where: str) -> Column:
    from ctxbench.core.registry import names, suggest

    if name in COST_COLUMNS:
        return Column(name, str(label or COST_COLUMNS[name][0]), metric=False)
    metrics = names("metric")
    if name in metrics:
        return Column(name, str(label or METRIC_LABELS.get(name, name)), metric=True)
    raise ReportError(f"{path}: {where}: {name!r} is neither a registered metric nor a board column."
                      f"{suggest(name, sorted(set(metrics) | set(COST_COLUMNS)), label='Columns')}")


def metric(r: dict[str, Any], key: str) -> float | None:
    """A row record's metric value (its run's ``overall``: ``metrics``, else a flat key such as ``f1``)."""
    m = r.get("metrics") or {}
    return m[key] if key in m else r.get(key)


def shown(columns: list[Column], records: list[dict[str, Any]]) -> list[Column]:
    """The columns the table shows: a default column that only some runs have is left out when none has it."""
    def present(c: Column) -> bool:
        return any((metric(r, c.name) if c.metric else r.get(c.name)) is not None for r in records)

    return [c for c in columns if c.always or present(c)]


def header(c: Column) -> str:
    return f"{c.label} ± SE" if c.metric else c.label


def cell(c: Column, r: dict[str, Any]) -> str:
    """The row record's text in column ``c``; a metric the run did not measure is ``—``."""
    if not c.metric:
        return COST_COLUMNS[c.name][1](r)
    v, se = metric(r, c.name), metric(r, f"{c.name}_stderr")
    if v is None:
        return MISSING
    lenient = " (lenient)" if c.name in (r.get("lenient") or ()) or r.get(f"{c.name}_lenient") else ""
    return f"{v:.3f}" + ("" if se is None else f" ± {se:.3f}") + lenient


def notes(columns: list[Column], records: list[dict[str, Any]]) -> list[str]:
    """The notes under the table: one per cost column shown, and which metric columns some run lacks."""
    out = [COST_COLUMNS[c.name][2] for c in columns if not c.metric and COST_COLUMNS[c.name][2]]
    missing = {}
    for c in columns:
        if c.metric:
            lacking = [r["label"] for r in records if r.get("run") and metric(r, c.name) is None]
            if lacking:
                missing[c.label] = lacking
    if missing:
        out.append("— in a metric column: the row's run did not measure it (not among its `metrics=`): "
                   + "; ".join(f"{label} on {', '.join(rows)}" for label, rows in missing.items()) + ".")
    return out
