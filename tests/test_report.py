"""report: sweep tables/plots from fabricated multirun folders; paper tables beside fabricated runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from ctxbench.report.runs import ReportError, find_runs
from ctxbench.report.sweep import sweep_report
from ctxbench.report.tables import PAPERS_DIR, load_table, table_names, table_report

CONF = Path(__file__).resolve().parents[1] / "conf"
LOCOMO_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_eval_run(d: Path, overrides: list[str], overall: dict, by_category: dict | None = None,
                  experiment: dict | None = None, created: str = "2026-01-01T00:00:00Z") -> Path:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config = {"seed": 0, **({"experiment": experiment} if experiment else {})}
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    res = {"overall": overall, "by_category": by_category or {}, "cost": {}, "created": created,
           "config": config, "metrics": {}, "git": {"commit": "abc"}}
    (d / "results.json").write_text(json.dumps(res))
    return d


def fake_train_run(d: Path, overrides: list[str], losses: list[float], eval_loss: float) -> Path:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": 0}))
    rows = [json.dumps({"step": i + 1, "loss": v, "lr": 1e-3, "ae_loss": v + 0.1}) for i, v in enumerate(losses)]
    rows.append(json.dumps({"step": len(losses), "final": True, "eval_loss": eval_loss}))
    (d / "metrics.jsonl").write_text("\n".join(rows) + "\n{\"step\": 9, \"lo")  # a torn last line (killed run)
    return d


def test_sweep_report_eval_jobs_table_and_plot(tmp_path):
    # job folders written out of order, with Hydra's <num>_<override_dirname> names; 10 sorts after 2
    for num, k, f1 in [(2, 4, 0.31), (0, 1, 0.12), (10, 8, 0.27), (1, 2, 0.2)]:
        fake_eval_run(tmp_path / f"{num}_memory.k={k}", ["memory=rag", f"memory.k={k}", "dataset=locomo_sample"],
                      {"n": 16, "f1": f1, "bleu1": f1 / 2, "f1_n": 12})
    res = sweep_report(tmp_path)
    assert res["swept"] == ["memory.k"]
    assert res["fixed"] == {"memory": "rag", "dataset": "locomo_sample"}
    assert res["metric"] == "f1"
    assert [r["memory.k"] for r in res["rows"]] == ["1", "2", "4", "8"]
    assert [r["f1"] for r in res["rows"]] == [0.12, 0.2, 0.31, 0.27]
    md = (tmp_path / "sweep.md").read_text()
    assert "| job | memory.k | n | f1 | bleu1 |" in md  # f1_n (a count, not a metric) is left out
    assert "| 10 | 8 | 16 | 0.2700 | 0.1350 |" in md
    png = (tmp_path / "sweep.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000


def test_sweep_report_two_swept_keys_and_metric_choice(tmp_path):
    i = 0
    for lr in ("1e-3", "3e-3"):
        for k in (1, 2):
            fake_eval_run(tmp_path / f"{i}_x", [f"trainer.lr={lr}", f"memory.k={k}"],
                          {"n": 4, "f1": 0.1 * (i + 1), "rougeL": 0.05 * (i + 1)})
            i += 1
    res = sweep_report(tmp_path, metric="rougeL")
    assert res["swept"] == ["trainer.lr", "memory.k"] and res["metric"] == "rougeL"
    assert (tmp_path / "sweep.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ReportError, match="not in these runs"):
        sweep_report(tmp_path, metric="bleu4")


def test_sweep_report_train_jobs_use_final_eval_loss(tmp_path):
    fake_train_run(tmp_path / "0_method.lambda_ae=0.2", ["method.lambda_ae=0.2"], [5.0, 4.0], 4.5)
    fake_train_run(tmp_path / "1_method.lambda_ae=0.8", ["method.lambda_ae=0.8"], [5.0, 3.0], 3.5)
    res = sweep_report(tmp_path)
    assert res["metric"] == "eval_loss"
    assert [(r["method.lambda_ae"], r["eval_loss"], r["final_loss"], r["step"]) for r in res["rows"]] == \
        [("0.2", 4.5, 4.0, 2), ("0.8", 3.5, 3.0, 2)]
    assert res["rows"][0]["ae_loss"] == pytest.approx(4.1)
    assert res["rows"][1]["eval_ppl"] == pytest.approx(33.1155, abs=1e-3)


def test_sweep_report_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ReportError, match="no finished jobs"):
        sweep_report(tmp_path)


AMEM_BY_CAT = {  # our fabricated run, fractions as results.json stores them
    "multi-hop": {"id": 1, "n": 3, "f1": 0.2, "f1_set": 0.30, "bleu1": 0.20},
    "temporal": {"id": 2, "n": 3, "f1": 0.4, "f1_set": 0.4585, "bleu1": 0.30},
    "single-hop": {"id": 4, "n": 5, "f1": 0.1, "f1_set": 0.10, "bleu1": None},
}


def test_table_report_ours_beside_paper_with_differences(tmp_path):
    runs = tmp_path / "runs"
    exp = {"name": "amem_locomo_table1_amem", "table": "amem_locomo_table1", "cell": "amem", "scale": "cpu"}
    fake_eval_run(runs / "old", [], {"n": 11}, {"multi-hop": {"id": 1, "n": 3, "f1_set": 0.99}},
                  experiment=exp, created="2026-01-01T00:00:00Z")
    fake_eval_run(runs / "new", [], {"n": 11}, AMEM_BY_CAT, experiment=exp, created="2026-02-01T00:00:00Z")
    res = table_report("amem_locomo_table1", [runs], tmp_path / "t.md")
    recs = {(r["cell"], r["name"], r["metric"]): r for r in res["records"]}
    mh = recs[("amem", "multi-hop", "F1")]  # paper 27.02, ours 0.30 → 30.00 (the newer run wins)
    assert mh["paper"] == 27.02 and mh["ours"] == pytest.approx(30.0) and mh["diff"] == pytest.approx(2.98)
    assert recs[("amem", "temporal", "F1")]["diff"] == pytest.approx(0.0)
    assert recs[("amem", "single-hop", "BLEU-1")]["ours"] is None  # metric missing → no difference
    assert recs[("amem", "adversarial", "F1")]["ours"] is None     # category absent from the run
    assert recs[("memorybank", "multi-hop", "F1")]["ours"] is None and \
        recs[("memorybank", "multi-hop", "F1")]["paper"] == 5.0
    md = (tmp_path / "t.md").read_text()
    assert "| Multi Hop | 1 | 3 | 27.02 / 30.00 / +2.98 | 20.09 / 20.00 / -0.09 |" in md
    assert "| Adversial (adversarial) | 5 | — | 50.03 / — / — | 49.47 / — / — |" in md
    assert "## MemGPT — `experiment=amem_locomo_table1_memgpt`; no run found" in md
    assert "(scale=cpu)" in md and str(runs / "new") in md
    assert json.loads((tmp_path / "t.json").read_text())[0]["cell"] == "locomo"


def test_mem0_table_maps_relabelled_categories_to_dataset_ids(tmp_path):
    exp = {"name": "mem0_locomo_table1_mem0", "scale": "cpu"}
    by_cat = {"multi-hop": {"id": 1, "n": 2, "f1_set": 0.5, "bleu1": 0.4, "llm_judge": 0.5},
              "single-hop": {"id": 4, "n": 2, "f1_set": 0.25, "bleu1": 0.2}}
    fake_eval_run(tmp_path / "r", [], {"n": 4}, by_cat, experiment=exp)
    res = table_report("mem0_locomo_table1", [tmp_path], tmp_path / "m.md")
    recs = {(r["cell"], r["category"], r["metric"]): r for r in res["records"]}
    # Mem0's "Single Hop" is dataset id 1 (official name multi-hop); its "Open Domain" is id 4 (single-hop)
    assert recs[("mem0", "Single Hop", "F1")]["ours"] == pytest.approx(50.0)
    assert recs[("mem0", "Single Hop", "J")]["diff"] == pytest.approx(50.0 - 67.13)
    assert recs[("mem0", "Open Domain", "F1")]["ours"] == pytest.approx(25.0)
    assert recs[("mem0", "Open Domain", "F1")]["paper"] == 47.65
    assert "## LangMem — no experiment config; not implemented in ctxbench" in (tmp_path / "m.md").read_text()


def test_table_report_cli_and_errors(tmp_path):
    exp = {"name": "amem_locomo_table1_locomo", "scale": "cpu"}
    fake_eval_run(tmp_path / "runs" / "a", [], {"n": 3}, AMEM_BY_CAT, experiment=exp)
    out = tmp_path / "tab.md"
    p = run_cli("report", "table=amem_locomo_table1", f"runs={tmp_path / 'runs'}", f"out={out}")
    assert p.returncode == 0, p.stderr
    assert "30.00" in p.stdout and out.exists() and "experiments found: amem_locomo_table1_locomo" in p.stdout
    p = run_cli("report", "table=amem_locmo")
    assert p.returncode == 2 and "did you mean 'amem_locomo_table1'" in p.stderr.lower()


def test_every_paper_table_is_well_formed_and_cites_its_source():
    names = table_names()
    assert {"amem_locomo_table1", "mem0_locomo_table1", "icae_table6", "icae_pwc", "ccm_metaicl",
            "ccm_dailydialog", "lococo_pile"} <= set(names)
    for name in names:
        t = load_table(name)
        assert t["name"] == name
        assert t["source"]["arxiv"] and t["source"]["paper"] and t["source"]["table"], name
        labels = [c["paper"] for c in t["categories"]]
        for cat in t["categories"]:
            if t.get("dataset") == "locomo" and cat["name"] != "overall":  # papers relabel: the id decides our name
                assert LOCOMO_NAMES[cat["id"]] == cat["name"], (name, cat)
        for cell in t["cells"]:
            assert set(cell.get("values") or {}) <= set(labels), (name, cell["cell"])
            for vals in (cell.get("values") or {}).values():
                assert set(vals) - {f"{m}_std" for m in t["metrics"]} <= set(t["metrics"]), (name, cell["cell"])
            if cell.get("experiment"):
                assert (CONF / "experiment" / f"{cell['experiment']}.yaml").exists(), cell["experiment"]
        text = (PAPERS_DIR / f"{name}.yaml").read_text()
        has_values = any(c.get("values") for c in t["cells"])
        assert has_values or "NOT STORED" in text, f"{name}: no numbers and no note saying why"


def test_find_runs_skips_checkpoints_and_reads_nested_runs(tmp_path):
    fake_eval_run(tmp_path / "a" / "b", ["x=1"], {"n": 1, "f1": 0.5})
    (tmp_path / "a" / "b" / "checkpoints" / "step_2").mkdir(parents=True)
    fake_train_run(tmp_path / "c", ["y=2"], [1.0], 0.9)
    runs = sorted(find_runs([tmp_path]), key=lambda r: r.path)
    assert [(r.path.name, r.kind) for r in runs] == [("b", "eval"), ("c", "train")]


def test_a_broken_run_folder_is_skipped_with_a_warning(tmp_path, capsys):
    fake_eval_run(tmp_path / "0_k=1", ["k=1"], {"n": 1, "f1": 0.5})
    fake_eval_run(tmp_path / "1_k=2", ["k=2"], {"n": 1, "f1": 0.7})
    (tmp_path / "2_k=3" / ".hydra").mkdir(parents=True)
    (tmp_path / "2_k=3" / "results.json").write_text("{not json")
    res = sweep_report(tmp_path, plot=False)
    assert [r["k"] for r in res["rows"]] == ["1", "2"]
    assert "2_k=3" in capsys.readouterr().err


def test_sweep_leaves_stderr_keys_out_of_the_metric_columns(tmp_path):
    for num, k, f1 in [(0, 1, 0.12), (1, 2, 0.2)]:
        fake_eval_run(tmp_path / f"{num}_memory.k={k}", [f"memory.k={k}"],
                      {"n": 16, "f1": f1, "f1_stderr": 0.05, "bleu1": f1 / 2, "bleu1_stderr": None})
    res = sweep_report(tmp_path, plot=False)
    assert "| job | memory.k | n | f1 | bleu1 |" in (tmp_path / "sweep.md").read_text()
    assert res["metric"] == "f1" and "f1_stderr" not in res["rows"][0]
    with pytest.raises(ReportError, match="not in these runs"):
        sweep_report(tmp_path, metric="f1_stderr", plot=False)


def test_table_report_shows_our_stderr_beside_our_number(tmp_path):
    exp = {"name": "amem_locomo_table1_amem", "scale": "cpu"}
    by_cat = {k: dict(v) for k, v in AMEM_BY_CAT.items()}
    by_cat["multi-hop"].update(f1_set_stderr=0.0412, bleu1_stderr=0.03)
    fake_eval_run(tmp_path / "r", [], {"n": 11}, by_cat, experiment=exp)
    res = table_report("amem_locomo_table1", [tmp_path], tmp_path / "t.md")
    recs = {(r["cell"], r["name"], r["metric"]): r for r in res["records"]}
    assert recs[("amem", "multi-hop", "F1")]["ours_stderr"] == pytest.approx(4.12)  # ×100 like ours
    assert recs[("amem", "temporal", "F1")]["ours_stderr"] is None  # not recorded (older results.json)
    md = (tmp_path / "t.md").read_text()
    assert "| Multi Hop | 1 | 3 | 27.02 / 30.00 ± 4.12 / +2.98 | 20.09 / 20.00 ± 3.00 / -0.09 |" in md
    assert "| Temporal | 2 | 3 | " in md and "45.85 / +" in md
