"""``report table=ruler`` and ``reproduce table=ruler``: the table, the kvpress-aligned CSV and the PNG
from run folders written by the real finalize code (a stand-in ``ruler_match`` metric, as the
contract defines it), the protocol rule for runs without a protocol block, and the plan's cells."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ctxbench.evaluation.finalize import finalize
from ctxbench.report.ruler import CSV_NAME, KVPRESS_COLUMNS, curves
from ctxbench.report.runs import ReportError
from ctxbench.report.tables import table_report
from ctxbench.reproduce import report as reproduce_report
from ctxbench.reproduce.plan import Options, plan

TASKS = ("niah_single_1", "vt")
N = 4  # questions per task


class RulerMatch:
    """The contract's ruler_match (RULER's string_match_all): the share of expected strings in the answer."""
    name, version, reference = "ruler_match", "test", "RULER string_match_all (stand-in)"

    def score(self, prediction, question):
        outs = [o for o in question.answer.split(", ") if o]
        return sum(o.lower() in prediction.lower() for o in outs) / len(outs)


def make_run(root: Path, folder: str, system: str, correct: dict[str, float], *, ratio: float | None = 0.5,
             press: str | None = None, query_aware: bool | str = False, slots: int = 512, created: str | None = None,
             dataset: str = "ruler") -> Path:
    """A run folder as eval task=compression dataset=ruler leaves it: ``correct[task]`` of N answers right
    (a half: one of the two expected strings)."""
    records = []
    for task in TASKS:
        for i in range(N):
            right, half = i < int(correct[task]), i == int(correct[task]) and correct[task] % 1 != 0
            records.append({"id": f"ruler-{task}-1024-{i}", "history_id": f"ruler-{task}-1024-{i}", "question": "q?",
                            "answer": "1234, 5678", "category": task, "category_name": task,
                            "prediction": "1234" if half else ("1234 and 5678" if right else "none"),
                            "usage": {"held_text": 0, "held_kv_slots": slots, "held_soft_slots": 0,
                                      "kv_bytes": slots * 100, "extra": {"compression_ratio": ratio, "budget": slots}}})
    cfg = {"seed": 0, "dataset": {"name": dataset, "length": 1024}, "model": {"name": "smollm2_135m"},
           "method": {"name": system, **({"press": press} if press else {})}}
    extra = {"system": system, "dataset": dataset}
    if ratio is not None:
        extra["protocol"] = {"name": "kvpress", "ratio": ratio, "query_aware": bool(query_aware),
                             "budget": "(1 - ratio) x context tokens, per example"}
        if query_aware is True:  # kvpress's compress_questions (evaluation/protocol.py protocol_record)
            extra["protocol"]["asked"] = "empty"
    out = root / folder
    out.mkdir(parents=True)
    finalize(out, records, [RulerMatch()], cfg, "eval", with_cost=True, extra=extra, progress=False)
    if created:
        res = json.loads((out / "results.json").read_text())
        res["created"] = created
        (out / "results.json").write_text(json.dumps(res))
    return out


@pytest.fixture()
def runs(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "full", "full_cache", {"niah_single_1": 4, "vt": 4}, ratio=None, slots=1024)  # no protocol: ratio 0
    make_run(root, "snap50", "snapkv", {"niah_single_1": 3, "vt": 2})
    make_run(root, "snap50_old", "snapkv", {"niah_single_1": 0, "vt": 0}, created="2000-01-01T00:00:00Z")  # older: loses
    make_run(root, "snap875", "snapkv", {"niah_single_1": 1, "vt": 0.5}, ratio=0.875, slots=128)
    make_run(root, "snap50_qa", "snapkv", {"niah_single_1": 4, "vt": 3}, query_aware=True)
    # query-aware as written before issue 54 (no protocol.asked): the question was asked again, not kvpress's mode
    make_run(root, "snap50_qa_again", "snapkv", {"niah_single_1": 4, "vt": 4}, query_aware="old")
    make_run(root, "knorm50", "method=kvpress", {"niah_single_1": 2, "vt": 2}, press="knorm")
    make_run(root, "locomo", "snapkv", {"niah_single_1": 0, "vt": 0}, ratio=None, dataset="locomo_sample")  # not RULER
    return root


def test_table_csv_and_png_from_run_folders(runs, tmp_path):
    out = tmp_path / "report" / "ruler.md"
    result = table_report("ruler", [runs], out)
    recs = {(r["method"], r["ratio"]): r for r in result["records"]}
    assert set(recs) == {("full_cache", 0.0), ("snapkv", 0.5), ("snapkv", 0.875), ("snapkv (query-aware)", 0.5),
                         ("snapkv (query-aware, asked again)", 0.5), ("kvpress:knorm", 0.5)}  # the locomo run is not RULER; the older snapkv@0.5 lost
    snap = recs[("snapkv", 0.5)]
    assert snap["run"].endswith("snap50") and snap["tasks"]["niah_single_1"]["score"] == 75.0
    assert snap["tasks"]["vt"]["score"] == 50.0 and snap["average"] == 62.5
    se1, se2 = snap["tasks"]["niah_single_1"]["stderr"], snap["tasks"]["vt"]["stderr"]
    assert snap["average_stderr"] == pytest.approx(((se1 ** 2 + se2 ** 2) ** 0.5) / 2, abs=0.01)
    assert recs[("snapkv", 0.875)]["tasks"]["vt"]["score"] == 12.5  # one half answer of four
    assert snap["held"]["kv_slots"] == 512 and snap["budget"] == 512 and snap["held"]["kv_bytes"] == 51200
    md = out.read_text()
    assert md == result["markdown"]
    assert "`ruler_match` = RULER's string_match_all (its postprocess_pred" in md  # says which reading it is
    avg = md.split("## Average over tasks", 1)[1].split("## Per task", 1)[0]
    assert "| method | ratio 0 | ratio 0.5 | ratio 0.875 |" in avg
    assert "| snapkv | — | 62.5 ± " in avg and "| full_cache | 100.0 ± 0.0 | — | — |" in avg
    assert "| kvpress:knorm | 0.5 | 8 | 512 | 512 | 50.0 ± " in md  # method, ratio, n, held / q, budget / q, tasks
    assert "![mean accuracy against compression ratio](ruler.png)" in md
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and result["png"] == str(png)
    assert json.loads(out.with_suffix(".json").read_text())[0]["method"] == "full_cache"
    with open(out.parent / CSV_NAME, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:len(KVPRESS_COLUMNS)] == list(KVPRESS_COLUMNS)  # kvpress's evaluate.py config keys
    assert list(rows[0])[len(KVPRESS_COLUMNS):len(KVPRESS_COLUMNS) + 3] == [*TASKS, "score"]
    by = {(r["press_name"], r["compression_ratio"], r["query_aware"]): r for r in rows}
    assert set(by) == {("no_press", "0.00", "False"), ("snapkv", "0.50", "False"), ("snapkv", "0.88", "False"),
                       ("snapkv", "0.50", "True"), ("snapkv", "0.50", "asked_again"), ("knorm", "0.50", "False")}
    # query_aware=True in kvpress's column only for kvpress's compress_questions (the question asked empty)
    assert by[("snapkv", "0.50", "True")]["run"].endswith("snap50_qa")
    knorm = by[("knorm", "0.50", "False")]
    assert (knorm["dataset"], knorm["data_dir"], knorm["model"], knorm["source"]) == ("ruler", "1024", "smollm2_135m",
                                                                                    "kvpress")
    assert float(knorm["niah_single_1"]) == 50.0 and float(knorm["score"]) == 50.0 and knorm["held_kv_slots"] == "512.0"
    assert by[("snapkv", "0.50", "False")]["source"] == "ctxbench"


def test_each_curve_starts_at_the_full_cache_point(runs, tmp_path):
    records = table_report("ruler", [runs], tmp_path / "r.md")["records"]
    c = curves(records)
    assert [p["ratio"] for p in c["snapkv"]] == [0.0, 0.5, 0.875] and c["snapkv"][0]["method"] == "full_cache"
    assert [p["ratio"] for p in c["kvpress:knorm"]] == [0.0, 0.5]


def test_a_compressing_run_without_a_protocol_block_is_refused(tmp_path):
    make_run(tmp_path / "runs", "old_snapkv", "snapkv", {"niah_single_1": 1, "vt": 1}, ratio=None)
    with pytest.raises(ReportError, match=r"old_snapkv: a RULER run without results.json protocol"):
        table_report("ruler", [tmp_path / "runs"], tmp_path / "r.md")


def test_reproduce_ends_with_the_ruler_table_and_plot(runs, capsys):
    reproduce_report("ruler", runs)
    printed = capsys.readouterr().out
    assert "## Average over tasks" in printed and "ruler.png" in printed and CSV_NAME in printed
    assert "methods found: full_cache, kvpress:knorm, snapkv, snapkv (query-aware)" in printed
    assert (runs / "ruler.png").read_bytes()[:4] == b"\x89PNG" and (runs / CSV_NAME).is_file()


CPU_ROWS = ("streamingllm", "h2o", "snapkv", "pyramidkv", "kvpress_knorm", "kvpress_expected_attention",
            "kvpress_tova", "kvpress_snapkv", "llmlingua", "rag")
PAPER_ONLY = ("llmlingua2", "icae", "ccm_concat", "ccm_merge", "lococo")
RATIOS = ("0.25", "0.5", "0.75", "0.875")
CPU_RATIOS = ("0.5", "0.875")  # ratio_scales: 0.25 and 0.75 run at scale=paper only


def test_the_plan_lists_method_by_ratio_cells(tmp_path):
    jobs, idle = plan("ruler", Options(scale="cpu", out=tmp_path))
    cells = {c for j in jobs for c in j.cells}
    assert cells == {"full_cache_r0"} | {f"{m}_r{r}" for m in CPU_ROWS for r in CPU_RATIOS}
    steps = {s.run_dir.name: s for j in jobs for s in j.steps}
    assert steps["kvpress_tova_r0.875"].overrides == ("experiment=ruler_kvpress_tova", "scale/ruler=cpu",
                                                      "task.ratio=0.875")
    assert all(s.command == "eval" for s in steps.values())  # nothing trained at CPU scale
    assert {c["cell"] for c in idle} == ({f"{m}_r{r}" for m in PAPER_ONLY for r in RATIOS}
                                         | {f"{m}_r{r}" for m in CPU_ROWS for r in ("0.25", "0.75")})
    assert next(c for c in idle if c["cell"] == "h2o_r0.75")["not_run"] == (
        "scale=cpu: the CPU preset runs ratios 0.5 and 0.875 (20 minutes on 2 cores)")
    assert next(c for c in idle if c["cell"] == "icae_r0.5")["not_run"].startswith("scale=cpu: needs a trained ICAE")
    jobs, idle = plan("ruler", Options(scale="paper", out=tmp_path))
    assert not idle and {c for j in jobs for c in j.cells} >= {f"icae_r{r}" for r in RATIOS}
    icae = next(j for j in jobs if "icae_r0.5" in j.cells)
    assert [s.command for s in icae.steps][:1] == ["train"] and set(icae.cells) == {f"icae_r{r}" for r in RATIOS}
    assert "checkpoint=" + str(tmp_path / "train" / "icae_pwc_finetune") in next(
        s for s in icae.steps if s.run_dir.name == "icae_r0.5").overrides  # each ratio reads the one training


def test_dry_run_through_the_cli(cli, tmp_path):
    proc = cli("reproduce", "table=ruler", "dry_run=true", f"out={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert "21 job(s)" in proc.stdout and "task.ratio=0.875" in proc.stdout
    assert "not run: llmlingua2_r0.25 (scale=cpu: LLMLingua-2's token classifier" in proc.stdout
    assert f"then: python -m ctxbench report table=ruler runs={tmp_path}" in proc.stdout
