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

**LongMemEval's question set and gold.** A record carrying ``retrieval_gold`` (the LongMemEval loader
writes it: :func:`ctxbench.data.longmemeval.retrieval_gold`) is scored as LongMemEval's
``src/retrieval/run_retrieval.py`` scores it, which indexes user turns only: the gold turns are the
user turns with ``has_answer`` in an answer session, the gold sessions the answer sessions holding one
(an answer session whose evidence is on the assistant's side is not gold), and a question without any
user-side ``has_answer`` turn is left out (``no_user_evidence_excluded``; e.g. single-session-assistant
questions). A question whose user-side evidence lies only outside its answer sessions has no gold and
is kept, as there (recall_any 0, recall_all 1, NDCG 0). ctxbench's wider view — every ``has_answer``
turn and every answer session as gold, no question dropped for lack of user-side evidence — is the
second block ``all_evidence`` (same shape), kept when it differs from the first.
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
              "k = distinct turns; abstention questions and questions without evidence left out; LongMemEval "
              "questions as its run_retrieval.py: user-side evidence only, questions without any left out")
WIDE = "all_evidence"  # results.json evidence_recall.all_evidence: ctxbench's wider view (every evidence turn)
WIDE_DEFINITION = ("as the main block, but every has_answer turn (user or assistant) and every answer session is "
                   "gold and no question is left out for lacking user-side evidence (ctxbench's view)")
RETRIEVAL_GOLD = "retrieval_gold"  # a record's LongMemEval retrieval gold (ctxbench/data/longmemeval.py)


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
    ideal = dcg([1] * min(len(gold), k))  # no gold (LongMemEval keeps such a question): 0, 1, 0
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


def record_gold(record: dict[str, Any], wide: bool = False) -> tuple[set[str], set[str]] | None:
    """(gold sessions, gold turns) of a record; LongMemEval's user-side gold (``retrieval_gold``) unless
    ``wide``; None when LongMemEval leaves the question out (no user-side evidence at all)."""
    gold = record.get(RETRIEVAL_GOLD)
    if wide or not isinstance(gold, dict):
        return evidence_sessions(record), evidence_turns(record)
    if not gold.get("has_target"):
        return None
    return {str(s) for s in gold.get("sessions") or []}, {str(t) for t in gold.get("turns") or []}


def record_recall(record: dict[str, Any], ks: tuple[int, ...] = KS, wide: bool = False) -> dict[str, dict[str, float]]:
    """One record's ``{level: {"<measure>@k": value}}`` for the levels it has evidence for (LongMemEval's
    gold: both levels, gold or not, as its run_retrieval.py scores every question it keeps)."""
    retrieved = record_retrieved(record) or []
    golds = record_gold(record, wide)
    if golds is None:
        return {}
    reference = isinstance(record.get(RETRIEVAL_GOLD), dict) and not wide
    out: dict[str, dict[str, float]] = {}
    for level, gold, ranked in (("session", golds[0], ranked_sessions), ("turn", golds[1], ranked_turns)):
        if not gold and not reference:
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


def _block(records: list[dict[str, Any]], ks: tuple[int, ...], wide: bool) -> dict[str, Any] | None:
    rows, cats = [], []
    abstention = no_evidence = no_user = 0
    for rec in records:
        if record_retrieved(rec) is None:
            continue
        if record_is_abstention(rec):
            abstention += 1
            continue
        if record_gold(rec, wide) is None:
            no_user += 1
            continue
        row = record_recall(rec, ks, wide)
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
    out = {"version": VERSION, "definition": WIDE_DEFINITION if wide else DEFINITION, "k": list(ks), "n": len(rows),
           **_means(rows), "by_category": by_cat, "abstention_excluded": abstention,
           "no_evidence_excluded": no_evidence}
    if not wide:
        out["no_user_evidence_excluded"] = no_user
    return out


def evidence_recall(records: list[dict[str, Any]], ks: tuple[int, ...] = KS) -> dict[str, Any] | None:
    """results.json ``evidence_recall``, or None when no record both retrieved and carries evidence: over
    LongMemEval's question set and gold for records that carry ``retrieval_gold``, with ctxbench's wider
    view (every evidence turn and session) as ``all_evidence`` when that differs."""
    main = _block(records, ks, wide=False)
    wide = _block(records, ks, wide=True) if any(isinstance(r.get(RETRIEVAL_GOLD), dict) for r in records) else None
    if main is None and wide is None:
        return None
    if main is None:
        main = {"version": VERSION, "definition": DEFINITION, "k": list(ks), "n": 0, "by_category": {},
                "abstention_excluded": wide["abstention_excluded"], "no_evidence_excluded": 0,
                "no_user_evidence_excluded": sum(1 for r in records if record_retrieved(r) is not None
                                                 and not record_is_abstention(r) and record_gold(r) is None)}
    if wide is not None and _levels(wide) != _levels(main):
        main[WIDE] = wide
    return main


def _levels(block: dict[str, Any]) -> tuple[Any, ...]:
    return (block.get("n"), *(block.get(level) for level in LEVELS))


def _table(block: dict[str, Any]) -> list[str]:
    lines = ["| level | n | " + " | ".join(f"{m}@{x}" for x in block["k"] for m in ("recall_any", "ndcg")) + " |",
             "|---|---|" + "---|" * (2 * len(block["k"]))]
    for level in LEVELS:
        row = block.get(level)
        if row:
            cells = [f"{row[f'{m}@{x}']:.3f}" for x in block["k"] for m in ("recall_any", "ndcg")]
            lines.append(f"| {level} | {row['n']} | " + " | ".join(cells) + " |")
    return lines


def markdown(block: dict[str, Any] | None) -> str:
    """results.md's evidence recall section: recall_any and ndcg at every k (recall_all in results.json),
    then ctxbench's wider view when results.json has it."""
    if not block:
        return ""
    user = block.get("no_user_evidence_excluded")
    lines = ["", "## Evidence recall", "",
             f"{block['n']} questions with evidence and a retrieval ({block['abstention_excluded']} abstention, "
             f"{block['no_evidence_excluded']} without evidence"
             + (f" and {user} without user-side evidence (as LongMemEval's run_retrieval.py)" if user else "")
             + f" left out); {DEFINITION}.", "", *_table(block)]
    wide = block.get(WIDE)
    if wide:
        lines += ["", f"All evidence (`{WIDE}`, ctxbench's view, not LongMemEval's): {wide['n']} questions; "
                      f"{WIDE_DEFINITION}.", "", *_table(wide)]
    return "\n".join(lines) + "\n"


def headline(block: dict[str, Any] | None, k: int = 5) -> float | None:
    """Session recall_any@k of a results.json block (the board's column), else None."""
    row = (block or {}).get("session") or {}
    v = row.get(f"recall_any@{k}")
    return None if v is None else float(v)
