"""Evidence recall: did the system retrieve the sessions and turns that hold the answer?

A system that retrieves records, per answer, what it retrieved in rank order (``meta.retrieved`` of a
prediction record: one ``{"session": id or null, "turns": [ids], ["sessions": [ids]]}`` per item —
a RAG chunk, a Mem0 memory, an A-Mem note, a MemGPT search hit, a ReadAgent page:
:mod:`ctxbench.memory.stores.retrieval_notes`). The gold is the question's evidence: its turns
(``evidence``; LoCoMo's ``D<s>:<t>`` dia ids are turn ids too) and its sessions (``evidence_sessions``:
LongMemEval's ``answer_session_ids``; for LoCoMo derived from the dia ids as ``session_<s>``).

The measures are LongMemEval's (xiaowu0162/LongMemEval ``src/retrieval/eval_utils.py``), for k in
:data:`KS`, at two levels:

- **session**: the items' sessions in rank order (an item's ``sessions`` in order when it spans several),
  each session kept at its first rank (duplicates collapsed); k counts *distinct sessions*. This is
  LongMemEval's ``evaluate_retrieval_turn2session`` for recall (it widens k until the top k holds k
  distinct sessions); NDCG is computed on the collapsed list (each session once), i.e. LongMemEval's
  ``evaluate_retrieval`` over a corpus of sessions, where turn2session would count a session's
  repeated turns again.
- **turn**: the items' turns in rank order, each kept at its first rank; k counts *distinct turns*
  (a chunk of two turns fills two of the k).

``recall_any@k`` = 1 if any gold id is in the top k; ``recall_all@k`` = 1 if all are;
``ndcg@k`` = DCG of the top k (relevance 1 for a gold id; LongMemEval's discount: rank 1 by 1, rank r >= 2
by log2(r), :func:`dcg`) over the ideal DCG of min(|gold|, k) relevant ids at the top. Records without ``meta.retrieved`` (systems that
retrieve nothing: full context, no context, compression methods; failed answers) are not counted;
abstention questions (id ending ``_abs`` or ``abstention: true``: nothing to retrieve, as LongMemEval
leaves them out) and questions without evidence at a level are left out of that level, with their
counts stated. Each level's numbers are means over its questions; ``by_category`` groups them per
category name.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from ctxbench.data.categories import record_is_abstention
from ctxbench.data.locomo import parse_evidence_id

KS = (1, 3, 5, 10)
LEVELS = ("session", "turn")
MEASURES = ("recall_any", "recall_all", "ndcg")
VERSION = "longmemeval-retrieval-1"
DEFINITION = ("LongMemEval src/retrieval/eval_utils.py recall_any@k, recall_all@k, ndcg@k; session level: items "
              "mapped to sessions, duplicates collapsed at their first rank, k = distinct sessions; turn level: "
              "k = distinct turns; abstention questions and questions without evidence left out")


def _distinct(ids: Iterable[Any]) -> list[str]:
    return list(dict.fromkeys(str(i) for i in ids if i not in (None, "")))


def item_sessions(item: dict[str, Any]) -> list[str]:
    """The sessions an item came from, in order (``sessions``, else ``session``)."""
    return _distinct(item.get("sessions") or [item.get("session")])


def ranked_sessions(retrieved: list[dict[str, Any]]) -> list[str]:
    """Distinct sessions in rank order (each at the rank of the first item that came from it)."""
    return _distinct(s for item in retrieved for s in item_sessions(item))


def ranked_turns(retrieved: list[dict[str, Any]]) -> list[str]:
    """Distinct turns in rank order."""
    return _distinct(t for item in retrieved for t in item.get("turns") or [])


def dcg(relevances: list[int]) -> float:
    """LongMemEval's DCG (``eval_utils.dcg``): the first relevance undiscounted, the one at 1-based rank r >= 2
    divided by log2(r) — not the textbook log2(r + 1), so ranks 1 and 2 weigh the same."""
    return sum(rel / (math.log2(rank + 1) if rank else 1.0) for rank, rel in enumerate(relevances))


def scores_at(ranked: list[str], gold: set[str], k: int) -> dict[str, float]:
    """``recall_any``, ``recall_all`` and ``ndcg`` of the top ``k`` of ``ranked`` against ``gold`` (not empty)."""
    top = ranked[:k]
    hit = [1 if x in gold else 0 for x in top]
    ideal = dcg([1] * min(len(gold), k))
    return {"recall_any": float(any(hit)), "recall_all": float(gold <= set(top)),
            "ndcg": dcg(hit) / ideal if ideal else 0.0}


def evidence_turns(record: dict[str, Any]) -> set[str]:
    """The gold turn ids: ``evidence`` (a malformed LoCoMo id like ``"D8:6; D9:17"`` read as its ids)."""
    out: set[str] = set()
    for e in record.get("evidence") or []:
        pairs = parse_evidence_id(str(e))
        out |= {f"D{s}:{t}" for s, t in pairs} if pairs else {str(e)}
    return out


def evidence_sessions(record: dict[str, Any]) -> set[str]:
    """The gold session ids: ``evidence_sessions``, else ``session_<s>`` of LoCoMo dia ids in ``evidence``."""
    given = record.get("evidence_sessions")
    if given:
        return {str(s) for s in given}
    return set(locomo_sessions(record.get("evidence") or []))


def locomo_sessions(evidence: Iterable[str]) -> list[str]:
    """``session_<s>`` of each LoCoMo dia id ``D<s>:<t>`` in ``evidence``, in order, once each."""
    return _distinct(f"session_{s}" for e in evidence for s, _ in parse_evidence_id(str(e)))


def record_retrieved(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``meta.retrieved`` of a record, or None when it retrieved nothing (not a retrieving system)."""
    meta = record.get("meta")
    got = meta.get("retrieved") if isinstance(meta, dict) else None
    return [x for x in got if isinstance(x, dict)] if isinstance(got, list) else None


def record_recall(record: dict[str, Any], ks: tuple[int, ...] = KS) -> dict[str, dict[str, float]]:
    """One record's ``{level: {"<measure>@k": value}}`` for the levels it has evidence for."""
    retrieved = record_retrieved(record) or []
    out: dict[str, dict[str, float]] = {}
    for level, gold, ranked in (("session", evidence_sessions(record), ranked_sessions),
                                ("turn", evidence_turns(record), ranked_turns)):
        if not gold:
            continue
        order = ranked(retrieved)
        out[level] = {f"{m}@{k}": v for k in ks for m, v in scores_at(order, gold, k).items()}
    return out


def _means(rows: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for level in LEVELS:
        got = [r[level] for r in rows if level in r]
        if got:
            block[level] = {"n": len(got), **{key: round(sum(g[key] for g in got) / len(got), 6) for key in got[0]}}
    return block


def evidence_recall(records: list[dict[str, Any]], ks: tuple[int, ...] = KS) -> dict[str, Any] | None:
    """results.json ``evidence_recall``, or None when no record both retrieved and carries evidence."""
    rows, cats = [], []
    abstention = no_evidence = 0
    for rec in records:
        if record_retrieved(rec) is None:
            continue
        if record_is_abstention(rec):
            abstention += 1
            continue
        row = record_recall(rec, ks)
        if not row:
            no_evidence += 1
            continue
        rows.append(row)
        cats.append(str(rec.get("category_name") or rec.get("category") or ""))
    if not rows:
        return None
    by_cat: dict[str, Any] = {}
    for cat in dict.fromkeys(cats):
        group = [r for r, c in zip(rows, cats) if c == cat]
        by_cat[cat] = {"n": len(group), **_means(group)}
    return {"version": VERSION, "definition": DEFINITION, "k": list(ks), "n": len(rows), **_means(rows),
            "by_category": by_cat, "abstention_excluded": abstention, "no_evidence_excluded": no_evidence}


def markdown(block: dict[str, Any] | None) -> str:
    """results.md's evidence recall section: recall_any and ndcg at every k (recall_all in results.json)."""
    if not block:
        return ""
    lines = ["", "## Evidence recall", "",
             f"{block['n']} questions with evidence and a retrieval ({block['abstention_excluded']} abstention and "
             f"{block['no_evidence_excluded']} without evidence left out); {DEFINITION}.", "",
             "| level | n | " + " | ".join(f"{m}@{x}" for x in block["k"] for m in ("recall_any", "ndcg")) + " |",
             "|---|---|" + "---|" * (2 * len(block["k"]))]
    for level in LEVELS:
        row = block.get(level)
        if row:
            cells = [f"{row[f'{m}@{x}']:.3f}" for x in block["k"] for m in ("recall_any", "ndcg")]
            lines.append(f"| {level} | {row['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def headline(block: dict[str, Any] | None, k: int = 5) -> float | None:
    """Session recall_any@k of a results.json block (the board's column), else None."""
    row = (block or {}).get("session") or {}
    v = row.get(f"recall_any@{k}")
    return None if v is None else float(v)
