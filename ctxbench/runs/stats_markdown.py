"""The results.md sections a reader decides with: failed answers, the corrected gold and its ceiling,
the minimum detectable difference, Wilson intervals for J and the judge's own variance.

Each function takes results.json (as :func:`ctxbench.evaluation.finalize.finalize` writes it) and the
metric names, and returns markdown lines (none when the results have nothing to say there).
"""
from __future__ import annotations

from typing import Any, Callable

from ctxbench.core.markdown_table import md_table

#: shown for the mismatched / unknown errata rows in results.md (results.json lists all)
MAX_ROWS_SHOWN = 5


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.2f}%"


def _int(v: Any) -> str:
    return "–" if v is None else f"{v:,}"


def _num(v: Any) -> str:
    return "–" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))


def _table(block: dict[str, Any], names: list[str], cell: Callable[[dict[str, Any], str], str]) -> list[str]:
    rows = [[name, _num(row.get("id")), _num(row.get("n")), *(cell(row, m) for m in names)]
            for name, row in (block.get("by_category") or {}).items()]
    ov = block.get("overall") or {}
    rows.append(["**overall**", "", _num(ov.get("n")), *(cell(ov, m) for m in names)])
    return md_table(["category", "id", "n", *names], rows, formatter=str).split("\n")


def failed_lines(results: dict[str, Any], names: list[str], cell: Callable[[dict[str, Any], str], str]) -> list[str]:
    """How many answers failed (scored 0 above) and, when some did, the numbers over the answered ones."""
    ov = results.get("overall") or {}
    if "failed_n" not in ov:
        return []
    k, n = ov["failed_n"], ov.get("n")
    if not k:
        return ["", f"Failed answers: 0 of {n}."]
    out = ["", f"Failed answers: {k} of {n}, each scored 0 in every metric above (J included), so a system "
               "gains nothing by failing. Over the answered questions alone:", ""]
    return out + _table(results.get("answered_only") or {}, names, cell)


def evidence_age_lines(results: dict[str, Any], names: list[str],
                       cell: Callable[[dict[str, Any], str], str]) -> list[str]:
    """results.json ``by_evidence_age`` (:mod:`ctxbench.metrics.evidence_age`) as a table: one row per
    bucket of sessions ago, or no lines when the questions carry no session evidence."""
    from ctxbench.metrics.evidence_age import DEFINITION

    ages = results.get("by_evidence_age")
    if not ages:
        return []
    rows = [[label, _num(row.get("n")), *(cell(row, m) for m in names)] for label, row in ages.items()]
    return ["", "## By evidence age", "", f"Sessions ago the evidence was said ({DEFINITION}); failed answers "
            "count 0 as above.", ""] + md_table(["sessions ago", "n", *names], rows, formatter=str).split("\n")


def corrected_lines(results: dict[str, Any], names: list[str],
                    cell: Callable[[dict[str, Any], str], str]) -> list[str]:
    """The corrected gold: the errata's outcomes, the ceiling, the numbers under the corrected answers."""
    fixed = results.get("corrected")
    if not fixed:
        return []
    er, ceil = fixed.get("errata") or {}, fixed.get("ceiling") or {}
    whole = er.get("dataset_ceiling") or {}
    cats = ", ".join(f"{c['id']} {name}" for name, c in (whole.get("categories") or {}).items())
    out = ["", "## Under the corrected gold", "",
           f"Errata `{er.get('file')}`: {er.get('rows')} rows; {er.get('applied')} applied (gold answer marked wrong "
           f"and replaced), {er.get('citation_only')} citation-only (answer right, evidence wrong: not applied), "
           f"{er.get('unchanged')} unchanged, {er.get('mismatched')} whose gold answer or question is not the "
           f"dataset's and {er.get('unknown')} with an unknown question id (neither applied).",
           "",
           f"**Ceiling: {_pct(whole.get('ceiling'))}** — {_int(whole.get('marked'))} of {_int(whole.get('n'))} gold "
           "answers in the "
           f"audited categories ({cats}) are marked wrong, so a system that is always right scores at most this "
           f"under the original gold. This run: {_int(ceil.get('marked'))} of {_int(ceil.get('n'))} questions "
           f"(ceiling {_pct(ceil.get('ceiling'))}; per category: "
           + ", ".join(f"{name} {_pct(c.get('ceiling'))}" for name, c in (ceil.get("categories") or {}).items())
           + ").", ""]
    out += _table(fixed, names, cell)
    bad = (er.get("mismatched_rows") or []) + (er.get("unknown_rows") or [])
    if bad:
        out += ["", "Errata rows not applied (results.json `corrected.errata` lists all):"]
        for r in bad[:MAX_ROWS_SHOWN]:
            what = (f"{r['field']} {r['errata']!r} is {r['dataset']!r} in the dataset" if "field" in r
                    else "no such question")
            out.append(f"- row {r['row']} `{r['question_id']}`: {what}")
        if len(bad) > MAX_ROWS_SHOWN:
            out.append(f"- … and {len(bad) - MAX_ROWS_SHOWN} more")
    if fixed.get("record_mismatch"):
        out += ["", f"{len(fixed['record_mismatch'])} records carry a gold answer other than the errata's original "
                    "and were scored under their own gold."]
    return out


def statistics_lines(results: dict[str, Any], names: list[str]) -> list[str]:
    """Minimum detectable difference per category, Wilson intervals for J, and the judge's variance."""
    st = results.get("statistics")
    if not st:
        return []
    how = (st.get("how") or {}).get("mdd") or {}
    judges = [m for m in names if m.startswith("llm_judge")]

    def row(name: str, node: dict[str, Any], n: Any) -> list[str]:
        return ([name, _num(n)] + [_num((node.get(m) or {}).get("mdd")) for m in names]
                + [_ci((node.get(m) or {}).get("wilson95")) for m in judges])

    rows = [row(c, node, max(((node.get(m) or {}).get("n") or 0) for m in names) if names else None)
            for c, node in (st.get("by_category") or {}).items()]
    ov = st.get("overall") or {}
    rows.append(row("**overall**", ov, max(((ov.get(m) or {}).get("n") or 0) for m in names) if names else None))
    out = ["", "## Statistics", "",
           f"MDD = the minimum detectable difference of each mean at this n: two-sided α = {how.get('alpha')}, "
           f"power {how.get('power')}, (z₁₋α/₂ + z_power) · s · √(2/n) with s the per-question standard deviation; "
           "a difference between two systems smaller than this is not resolved by this many questions"
           + (" (J: Wilson 95% interval)." if judges else "."), ""]
    out += md_table(["category", "n", *[f"MDD {m}" for m in names], *[f"{m} Wilson 95%" for m in judges]], rows,
                    formatter=str).split("\n")
    runs = results.get("metric_runs") or {}
    for m, info in runs.items():
        std = (results.get("overall") or {}).get(f"{m}_std")
        out += ["", f"Judge reruns (the variance of the judge, the same answers judged {info.get('runs')} times): "
                    f"{m} std over runs = {_num(std)} (ddof {(info.get('std') or {}).get('ddof', 1)}: "
                    f"{(info.get('std') or {}).get('convention') or 'the sample std'})"
                    + (" (every run gave the same labels)" if info.get("identical_runs") else "")
                    + ". The variance of the system (the whole run repeated) is another number: "
                      "`python -m ctxbench report reruns=RUN1,RUN2,...`."]
    return out


def _ci(ci: Any) -> str:
    return "–" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"
