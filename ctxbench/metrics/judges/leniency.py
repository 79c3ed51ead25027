"""How lenient each judge is, measured on the calibration set, and where that is recorded.

Rates (:func:`judge_rates`): an item's score is the judge's label averaged over its runs (1 accepted,
0 rejected). The **false-accept rate** is the mean score over the should-reject items (overall and per
wrong-answer kind: wrong_date, wrong_entity, vague, hedge); the **false-reject rate** is one minus the
mean score over the should-accept items (paraphrases). Items the judge left unlabelled (a failed call,
a reply its parse cannot read) are counted (``unlabelled``) and left out of the rates. Each rate has its
n and a Wilson 95% interval (:func:`wilson`). A judge is **lenient** when its false-accept rate exceeds
``judge.lenient_above`` (default 0.2: a judge that accepts more than one wrong answer in five).

Where it goes: ``report judges`` writes judges.json / judges.md (:func:`leniency_report`,
:func:`judges_markdown`); an ``eval`` / ``score`` run writes results.json ``judges`` (:func:`judges_block`):
``{name: {prompt_version, model, runs, seed, temperature, metrics, false_accept, false_reject, lenient,
calibration}}`` — the rates from ``judge.calibration=PATH`` (a judges.json) when its entry for that judge
has the same prompt version and model, else null with the reason in ``calibration``. Every table that
shows a lenient judge's J marks it (:func:`lenient_metrics`: results.md here, the board through it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.metrics.judges.calibration_set import KINDS

DEFAULT_LENIENT_ABOVE = 0.2
Z95 = 1.959963984540054


def wilson(successes: float, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of ``successes`` out of ``n`` (None for n = 0)."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def _rate(scores: list[float | None], flip: bool = False) -> dict[str, Any]:
    got = [1.0 - s if flip else s for s in scores if s is not None]
    n = len(got)
    k = sum(got)
    return {"rate": None if n == 0 else round(k / n, 4), "n": n, "ci95": wilson(k, n),
            "unlabelled": len(scores) - n}


JUDGE_FAILED = "_judge_failed"  # a record's <metric>_judge_failed: a judge call failed (ctxbench/metrics/judge.py)

def judge_rates(items: list[dict[str, Any]], scored: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """False-accept (overall and by kind) and false-reject of one judge metric over the scored items."""
    # a failed judge call scores 0 in J (counted wrong) but is no label here: unlabelled, as before
    by_id = {str(r["id"]): None if r.get(metric + JUDGE_FAILED) else r.get(metric) for r in scored}
    reject = [it for it in items if it["expect"] == "reject"]
    accept = [it for it in items if it["expect"] == "accept"]
    return {"false_accept": _rate([by_id.get(it["id"]) for it in reject]),
            "false_accept_by_kind": {k: _rate([by_id.get(it["id"]) for it in reject if it["kind"] == k])
                                     for k in KINDS if any(it["kind"] == k for it in reject)},
            "false_reject": _rate([by_id.get(it["id"]) for it in accept], flip=True)}


def is_lenient(false_accept: float | None, lenient_above: float) -> bool | None:
    return None if false_accept is None else bool(false_accept > float(lenient_above))


def judge_identity(metric: Any) -> dict[str, Any]:
    """A judge metric's prompt version, model and decoding (results.json / judges.json)."""
    return {"prompt_version": metric.version, "source": metric.reference, "model": metric.model(),
            "runs": metric.runs, "seed": metric.seed, "seeds": metric.seeds(), "temperature": metric.temperature,
            "max_new_tokens": metric.max_new_tokens, "json_mode": metric.prompt.json_mode,
            "schema": metric.prompt.schema is not None}


def panel_judges(metrics: list[Any]) -> dict[str, list[Any]]:
    """Judge name → its metrics (``llm_judge`` and/or ``llm_judge_<name>``), in panel order."""
    out: dict[str, list[Any]] = {}
    for m in metrics:
        if getattr(m, "judge", None) and hasattr(m, "prompt"):
            out.setdefault(m.judge, []).append(m)
    return out


def leniency_report(items: list[dict[str, Any]], scored: list[dict[str, Any]], metrics: list[Any],
                    lenient_above: float, calibration_set: dict[str, Any]) -> dict[str, Any]:
    """judges.json: the set's description, the threshold, and per judge its identity, rates and flag."""
    judges: dict[str, Any] = {}
    for name, ms in panel_judges(metrics).items():
        metric = ms[-1]
        rates = judge_rates(items, scored, metric.name)
        fa, fr = rates["false_accept"]["rate"], rates["false_reject"]["rate"]
        judges[name] = {**judge_identity(metric), "metrics": [m.name for m in ms],
                        "false_accept": fa, "false_reject": fr, "lenient": is_lenient(fa, lenient_above),
                        "false_accept_ci95": rates["false_accept"]["ci95"],
                        "false_reject_ci95": rates["false_reject"]["ci95"], "rates": rates}
    return {"calibration_set": calibration_set, "lenient_above": float(lenient_above), "judges": judges}


def load_calibration(path: str | Path) -> dict[str, Any]:
    """A judges.json written by ``report judges``; one line naming the file otherwise."""
    p = Path(path)
    if not p.is_file():
        raise DataError(p, "judge.calibration: no such file (a judges.json that `python -m ctxbench report judges` "
                           "writes)", field="judge.calibration")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(p, f"judge.calibration: not JSON ({e})", field="judge.calibration") from None
    if not isinstance(data, dict) or not isinstance(data.get("judges"), dict):
        raise DataError(p, "judge.calibration: no 'judges' mapping (not a judges.json from `report judges`)",
                        field="judges")
    return data


def _calibrated(entry: dict[str, Any], cal: dict[str, Any] | None, path: Any, lenient_above: float) -> dict[str, Any]:
    none = {"false_accept": None, "false_reject": None, "lenient": None}
    if cal is None:
        return {**none, "calibration": None}
    if cal is False:
        return {**none, "calibration": {"path": str(path), "matched": False, "why": "judge not in the calibration"}}
    for key in ("prompt_version", "model"):
        if cal.get(key) != entry.get(key):
            return {**none, "calibration": {"path": str(path), "matched": False,
                                            "why": f"{key} {cal.get(key)!r} there, {entry.get(key)!r} here"}}
    fa = cal.get("false_accept")
    return {"false_accept": fa, "false_reject": cal.get("false_reject"), "lenient": is_lenient(fa, lenient_above),
            "false_accept_ci95": cal.get("false_accept_ci95"), "false_reject_ci95": cal.get("false_reject_ci95"),
            "calibration": {"path": str(path), "matched": True,
                            "set": (cal.get("calibration_set") or {}).get("hash")}}


def judges_block(metrics: list[Any], judge_cfg: Any) -> dict[str, Any] | None:
    """results.json ``judges`` for the run's judge metrics (None when it has none)."""
    panel = panel_judges(metrics)
    if not panel:
        return None
    from ctxbench.metrics.judges.panel import judge_settings

    judge_cfg = judge_settings(judge_cfg)
    path = None if judge_cfg is None else judge_cfg.calibration
    above = DEFAULT_LENIENT_ABOVE if judge_cfg is None or judge_cfg.lenient_above is None \
        else float(judge_cfg.lenient_above)
    data = load_calibration(path) if path else None
    out = {}
    for name, ms in panel.items():
        entry = {**judge_identity(ms[0]), "metrics": [m.name for m in ms]}
        cal = None if data is None else data["judges"].get(name, False)
        if cal:
            cal = {**cal, "calibration_set": data.get("calibration_set")}
        out[name] = {**entry, **_calibrated(entry, cal, path, above)}
    return out


def lenient_metrics(results: dict[str, Any]) -> set[str]:
    """The metric names whose judge results.json flags as lenient."""
    return {m for j in (results.get("judges") or {}).values() if j.get("lenient") for m in j.get("metrics", [])}


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * float(v):.1f}%"


def _ci(v: Any) -> str:
    return "" if not v else f" [{100 * v[0]:.1f}, {100 * v[1]:.1f}]"


def judges_markdown(report: dict[str, Any]) -> str:
    """judges.md: per judge, its false-accept rate (overall and per kind) and false-reject rate."""
    from ctxbench.core.markdown_table import md_table

    cs = report.get("calibration_set") or {}
    kinds = [k for k in KINDS if k != "paraphrase"]
    lines = ["# Judge leniency on the calibration set", "",
             f"{cs.get('items')} items from {cs.get('questions')} questions of {cs.get('dataset')} (seed "
             f"{cs.get('seed')}; set {str(cs.get('hash'))[:12]}): {cs.get('by_kind')}.", ""]
    rows = []
    for name, j in report["judges"].items():
        r = j["rates"]
        by = r["false_accept_by_kind"]
        rows.append([name, j.get("prompt_version"), j.get("model"), j["runs"],
                     f"{_pct(j['false_accept'])}{_ci(j['false_accept_ci95'])} (n={r['false_accept']['n']})",
                     *[(f"{_pct(by[k]['rate'])} (n={by[k]['n']})" if k in by else "–") for k in kinds],
                     f"{_pct(j['false_reject'])}{_ci(j['false_reject_ci95'])} (n={r['false_reject']['n']})",
                     sum(x["unlabelled"] for x in (r["false_accept"], r["false_reject"])),
                     "**lenient**" if j["lenient"] else ("no" if j["lenient"] is False else "–")])
    lines += md_table(["judge", "prompt", "model", "runs", "false accept [95% CI]",
                       *[f"accepts {k}" for k in kinds], "false reject [95% CI]", "unlabelled", "lenient"],
                      rows, formatter=str).split("\n")
    lines += ["", f"False accept: share of the wrong answers (wrong date, swapped entity, vague, hedge) the judge "
                  f"labels correct; false reject: share of the correct paraphrases it labels wrong. Intervals: "
                  f"Wilson 95%. Lenient: false accept above {_pct(report['lenient_above'])} (judge.lenient_above).",
              ""]
    return "\n".join(lines)


def judges_section(results: dict[str, Any]) -> list[str]:
    """results.md's "Judges" section: J per judge, the spread across judges, and leniency where known."""
    from ctxbench.core.markdown_table import md_table

    judges = results.get("judges") or {}
    if not judges:
        return []
    ov = results.get("overall") or {}
    rows, values = [], []
    for name, j in judges.items():
        metric = (j.get("metrics") or [f"llm_judge_{name}"])[-1]
        v = ov.get(metric)
        if v is not None:
            values.append(float(v))
        rows.append([name, f"`{metric}`", "–" if v is None else f"{v:.4f}", j.get("prompt_version"), j.get("model"),
                     j.get("runs"), j.get("temperature"), _pct(j.get("false_accept")), _pct(j.get("false_reject")),
                     "**lenient**" if j.get("lenient") else ("no" if j.get("lenient") is False else "not measured")])
    lines = ["", "## Judges", ""]
    lines += md_table(["judge", "metric", "J", "prompt", "model", "runs", "temperature", "false accept",
                       "false reject", "lenient"], rows, formatter=str).split("\n")
    if len(values) > 1:
        lines += ["", f"Spread of J across the {len(values)} judges (max − min): {max(values) - min(values):.4f}."]
    if any(j.get("lenient") for j in judges.values()):
        lines += ["", "(lenient): this judge accepts more wrong answers than judge.lenient_above on the calibration "
                      "set (`python -m ctxbench report judges`); its J overstates."]
    return lines
