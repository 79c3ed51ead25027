"""``python -m ctxbench report compare=RUN_A,RUN_B``: is B better than A, and by how much?

Each run folder's predictions.jsonl gives the per-question scores. The two runs must have been asked the
same questions (the board's question hash, :func:`ctxbench.report.board.question_hash`, over every id
in predictions.jsonl, failed ones included); otherwise the command refuses in one line. The pairs are
every question asked, a failed answer scoring 0 in every metric as in the headline numbers
(:func:`ctxbench.metrics.aggregate.failed_as_wrong`), so compare's Δ is the difference of the two
headlines; compare.json ``answered_only`` holds the same comparison over the questions both runs
answered (the failed counts in ``failed``), labelled as such in compare.md. For every metric both runs scored — results.json ``metrics``, every
per-question ``llm_judge*`` field (each judge of a panel), and, when both runs were scored under
corrected gold, ``<metric>@corrected`` — overall and per category:
Δ = mean(B) − mean(A), its 95% paired-bootstrap interval and two-sided p
(:func:`ctxbench.metrics.stats.paired_bootstrap`: 10,000 resamples, seed 1234; the same command gives
the same numbers). Two runs whose judge metrics were judged by different models (results.json
``metrics.<judge>.model``, each row's ``judged_by``) are refused in one line; ``judge_mismatch=mark``
compares them and marks it. Writes ``compare.json`` and ``compare.md`` (``out=`` names the markdown file; by
default ``outputs/report/compare_<A>_vs_<B>.md``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbench.metrics.aggregate import RUNS_SUFFIX, STD_SUFFIX, _cat_key
from ctxbench.metrics.stats import COMPARE_MIN_N, COMPARE_RESAMPLES, COMPARE_SEED, paired_bootstrap
from ctxbench.report.board import question_hash
from ctxbench.report.runs import RESULTS_JSON, ReportError, read_json_object
from ctxbench.runs.results import atomic_write_text, read_jsonl_tolerant, write_json

PREDICTIONS = "predictions.jsonl"
CORRECTED = "corrected"
_NOT_METRIC = (RUNS_SUFFIX, STD_SUFFIX, "_stderr", "_n")
SIGNIFICANT = 0.05


@dataclass
class RunScores:
    """One run folder's per-question records and the metric names its results.json lists."""

    path: Path
    records: list[dict[str, Any]]
    metrics: list[str]
    results: dict[str, Any]

    @property
    def ids(self) -> list[str]:
        return [str(r["id"]) for r in self.records]

    @property
    def answered(self) -> dict[str, dict[str, Any]]:
        return {str(r["id"]): r for r in self.records if not r.get("failed")}

    @property
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {str(r["id"]): r for r in self.records}


def run_paths(value: Any, what: str) -> list[Path]:
    """``A,B`` / ``[A,B]`` → paths (each must be a folder or a predictions.jsonl)."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [Path(p.strip()) for p in items if str(p).strip()]


def load_scores(path: Path) -> RunScores:
    """A run folder (or its predictions.jsonl) as :class:`RunScores`; a folder without predictions is a
    one-line :class:`ReportError`."""
    folder = path.parent if path.name == PREDICTIONS else path
    preds = folder / PREDICTIONS
    if not folder.is_dir():
        raise ReportError(f"{path}: no such run folder")
    if not preds.is_file():
        raise ReportError(f"{folder}: no {PREDICTIONS} (give an eval or score run folder)")
    records, _ = read_jsonl_tolerant(preds, required=("id",))
    results = read_json_object(folder / RESULTS_JSON) if (folder / RESULTS_JSON).is_file() else {}
    names = list((results.get("metrics") or {}).keys())
    judges = sorted({k for r in records for k, v in r.items() if k.startswith("llm_judge")
                     and not k.endswith(_NOT_METRIC) and _number(v)})
    names += [j for j in judges if j not in names]
    if results.get(CORRECTED):
        names += [f"{m}@{CORRECTED}" for m in list(names)]
    return RunScores(folder, records, names, results)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value(rec: dict[str, Any], metric: str) -> float | None:
    """A record's score for ``metric``; ``m@corrected`` is its corrected score where its gold was
    corrected, else its score under the original gold."""
    tag = f"@{CORRECTED}"
    name = metric[: -len(tag)] if metric.endswith(tag) else metric
    if name != metric and isinstance(rec.get(CORRECTED), dict) and _number(rec[CORRECTED].get(name)):
        return float(rec[CORRECTED][name])
    v = rec.get(name)
    return float(v) if _number(v) else None


def headline_value(rec: dict[str, Any], metric: str) -> float | None:
    """:func:`value`, a failed answer scoring 0 in every metric (the headline's rule)."""
    return 0.0 if rec.get("failed") else value(rec, metric)


def judge_models(run: RunScores) -> dict[str, str]:
    """Judge metric → the model that judged it: results.json ``metrics.<m>.model``, else the rows' ``judged_by``."""
    out = {m: str(v["model"]) for m, v in (run.results.get("metrics") or {}).items()
           if isinstance(v, dict) and v.get("model")}
    for rec in run.records:
        for m, model in (rec.get("judged_by") or {}).items():
            out.setdefault(m, str(model))
    return out


JUDGE_MISMATCH = ("refuse", "mark")


def check_same_judges(a: RunScores, b: RunScores, mismatch: str = "refuse") -> dict[str, Any]:
    """``{metric: {"a": model, "b": model}}`` for the judge metrics both runs have whose judge models differ;
    with ``mismatch=refuse`` (the default) a one-line ReportError instead."""
    ma, mb = judge_models(a), judge_models(b)
    differ = {m: {"a": ma[m], "b": mb[m]} for m in sorted(set(ma) & set(mb) & set(a.metrics) & set(b.metrics))
              if ma[m] != mb[m]}
    if differ and mismatch == "refuse":
        m, pair = next(iter(differ.items()))
        raise ReportError(f"{a.path} and {b.path} were judged by different models ({m}: {pair['a']} vs {pair['b']}); "
                          "a J difference would mix the systems with the judges: re-judge one run "
                          "(score predictions=... judge_llm=...) or pass judge_mismatch=mark to compare them anyway")
    return differ


def check_same_questions(a: RunScores, b: RunScores) -> str:
    """The shared question hash, or a one-line ReportError naming both runs and how they differ."""
    ha, hb = question_hash(a.ids), question_hash(b.ids)
    if ha != hb or ha is None:
        only_a, only_b = len(set(a.ids) - set(b.ids)), len(set(b.ids) - set(a.ids))
        raise ReportError(f"{a.path} and {b.path} were asked different questions (question hash {ha} vs {hb}: "
                          f"{only_a} only in the first, {only_b} only in the second); compare runs on the same "
                          "questions")
    return ha


def category_of(rec: dict[str, Any]) -> str:
    return str(rec.get("category_name") or rec.get("category") or "uncategorised")


def _compare_over(ids: list[str], recs_a: dict[str, dict[str, Any]], recs_b: dict[str, dict[str, Any]],
                  metrics: list[str], resamples: int, seed: int) -> dict[str, Any]:
    """``{metric: {"overall" | category: paired_bootstrap}}`` over ``ids`` (categories in results.json order)."""
    cats: dict[str, list[str]] = {}
    for i in ids:
        cats.setdefault(category_of(recs_a[i]), []).append(i)
    cats = {c: cats[c] for c in sorted(cats, key=lambda c: _cat_key(recs_a[cats[c][0]].get("category")))}
    out: dict[str, Any] = {}
    for m in metrics:
        node = {}
        for g, group in {"overall": ids, **cats}.items():
            pairs = [(headline_value(recs_a[i], m), headline_value(recs_b[i], m)) for i in group]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            node[g] = paired_bootstrap([x for x, _ in pairs], [y for _, y in pairs], resamples, seed)
        out[m] = node
    return out


def compare_runs(a: RunScores, b: RunScores, resamples: int = COMPARE_RESAMPLES,
                 seed: int = COMPARE_SEED, judge_mismatch: str = "refuse") -> dict[str, Any]:
    """compare.json: per metric, overall and per category, the paired bootstrap of B − A over every
    question (failed = 0), and ``answered_only`` over the questions both runs answered. Runs whose
    judges are different models are refused (``judge_mismatch=mark``: compared, and marked)."""
    qhash = check_same_questions(a, b)
    differ = check_same_judges(a, b, judge_mismatch)
    ans_a, ans_b = a.answered, b.answered
    every = a.ids  # A's order (dataset order)
    both = [i for i in every if i in ans_a and i in ans_b]
    metrics = [m for m in a.metrics if m in b.metrics]
    recs_a, recs_b = a.by_id, b.by_id
    out: dict[str, Any] = {"a": str(a.path), "b": str(b.path), "questions": qhash, "n_questions": len(a.ids),
                           "paired": len(every), "failed_as": 0.0,
                           "failed": {"a": len(a.ids) - len(ans_a), "b": len(b.ids) - len(ans_b),
                                      "either": len(a.ids) - len(both)},
                           "only_in_one": sorted(set(a.metrics) ^ set(b.metrics)),
                           "judge_models": {"a": judge_models(a), "b": judge_models(b), "differ": differ},
                           "method": {"test": "paired bootstrap", "resamples": resamples, "seed": seed,
                                      "delta": "mean(B) - mean(A)", "ci": "percentile 95%",
                                      "pairs": "every question; a failed answer scores 0 (as the headline)",
                                      "p": "two-sided: min(1, 2*min(P*(d<=0), P*(d>=0))), P* = (count+1)/(B+1)",
                                      "min_n": COMPARE_MIN_N,
                                      "no_p": "below min_n pairs, or every resample the same: delta only"},
                           "metrics": _compare_over(every, recs_a, recs_b, metrics, resamples, seed),
                           "answered_only": {"paired": len(both),
                                             "metrics": _compare_over(both, recs_a, recs_b, metrics, resamples,
                                                                      seed)}}
    return out


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v:+.4f}" if signed else f"{v:.4f}"


def _metric_tables(metrics: dict[str, Any], title: str = "") -> list[str]:
    from ctxbench.core.markdown_table import md_table

    lines = []
    for m, node in metrics.items():
        rows = []
        for g, r in node.items():
            ci = r.get("ci95")
            star = " *" if r.get("p") is not None and r["p"] < SIGNIFICANT else ""
            rows.append([f"**{g}**" if g == "overall" else g, r["n"], _fmt(r["a"]), _fmt(r["b"]),
                         _fmt(r["delta"], True) + star, "–" if not ci else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]",
                         r["note"] if r.get("note") else _fmt(r["p"])])
        lines += [f"## {m}{title}", "", md_table(["group", "n", "A", "B", "Δ", "95% CI", "p"], rows, formatter=str), ""]
    return lines


def compare_markdown(res: dict[str, Any]) -> str:
    failed = res["failed"]
    lines = ["# Compare: B − A", "", f"- A: `{res['a']}`", f"- B: `{res['b']}`", "",
             f"Questions: {res['n_questions']} (hash {res['questions']}), paired over every question, a failed "
             f"answer scoring 0 as in the headline numbers (failed: {failed['a']} in A, {failed['b']} in B). "
             f"Δ = mean(B) − mean(A) with its 95% paired-bootstrap interval ({res['method']['resamples']} "
             f"resamples, seed {res['method']['seed']}) and two-sided p; * = p < {SIGNIFICANT}. Below "
             f"{COMPARE_MIN_N} questions, or when every resample gives the same Δ, no interval or p (\"n too small\", "
             "\"no variance\"): only Δ.", ""]
    differ = (res.get("judge_models") or {}).get("differ") or {}
    if differ:
        lines += ["**Judged by different models** (judge_mismatch=mark): "
                  + "; ".join(f"{m}: A {v['a']}, B {v['b']}" for m, v in differ.items())
                  + ". A difference in these metrics mixes the systems with the judges.", ""]
    lines += _metric_tables(res["metrics"])
    if failed["either"]:
        only = res["answered_only"]
        lines += [f"# Answered only: the {only['paired']} questions both runs answered", "",
                  f"The same comparison with the {failed['either']} questions a run failed left out (not the "
                  "headline's numbers).", ""]
        lines += _metric_tables(only["metrics"], " (answered only)")
    if res["only_in_one"]:
        lines += [f"Metrics only one run has (not compared): {', '.join(res['only_in_one'])}.", ""]
    return "\n".join(lines)


def compare_report(value_: Any, out: str | None = None, judge_mismatch: str = "refuse") -> dict[str, Any]:
    """``report compare=A,B``: compare.json and compare.md; returns the comparison plus ``path``."""
    paths = run_paths(value_, "compare")
    if len(paths) != 2:
        raise ReportError(f"compare= takes two run folders, A,B; got {len(paths)}")
    a, b = (load_scores(p) for p in paths)
    res = compare_runs(a, b, judge_mismatch=judge_mismatch)
    md = Path(out) if out else Path("outputs/report") / f"compare_{a.path.name}_vs_{b.path.name}.md"
    write_json(md.with_suffix(".json"), res)
    atomic_write_text(md, compare_markdown(res))
    return {**res, "path": str(md), "markdown": compare_markdown(res)}
