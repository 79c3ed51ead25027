"""Paper tables read task runs (eval task=perplexity|reconstruction|choice): the selected row, never a
training loss, and "not comparable" (ours shown, no Δ) when the run's setting is not the paper's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ctxbench.report.runs import ReportError
from ctxbench.report import tables as T


def task_run(d: Path, experiment: str, model: dict, rows: list[dict]) -> Path:
    (d / ".hydra").mkdir(parents=True)
    config = {"seed": 0, "model": model, "method": {"name": "icae_pretrain"},
              "experiment": {"name": experiment, "scale": "cpu"}}
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"experiment={experiment}"]))
    res = {"task": "perplexity", "system": "method=icae_pretrain", "rows": rows, "config": config,
           "created": "2026-12-02T00:00:00Z", "git": {"commit": "abc"}}
    (d / "results.json").write_text(json.dumps(res))
    return d


ROWS = [{"system": "icae_pretrain", "length": 512, "n": 16, "ppl": 21.5, "nll_per_token": 3.07},
        {"system": "full_context", "length": 512, "n": 16, "ppl": 17.25},
        {"system": "icae_pretrain", "length": 1024, "n": 16, "ppl": 99.0}]


def test_icae_table6_reads_the_selected_rows_and_says_not_comparable_for_another_model(tmp_path):
    task_run(tmp_path / "ppl", "icae_table6_ppl", {"name": "smollm2_135m"}, ROWS)
    res = T.table_report("icae_table6", [tmp_path], tmp_path / "t.md")
    recs = {(r["cell"], r["metric"]): r for r in res["records"]}
    slots, orig = recs[("memory_slots", "PPL")], recs[("original_context", "PPL")]
    assert (slots["paper"], slots["ours"], orig["paper"], orig["ours"]) == (9.18, 21.5, 8.81, 17.25)
    assert not slots["comparable"] and slots["diff"] is None
    # an unset model.label names the model that ran, beside the paper's label
    assert "model.name='smollm2_135m' (paper 'llama2_7b')" in slots["not_comparable"]
    md = res["markdown"]
    assert "9.18 / 21.50 / not comparable" in md and "8.81 / 17.25 / not comparable" in md
    assert "train experiment=icae_pwc_pretrain" in md          # how the checkpoint is made
    assert recs[("autoencoding", "BLEU")]["ours"] is None      # no reconstruction run: —


def test_same_setting_as_the_paper_prints_the_difference(tmp_path):
    task_run(tmp_path / "ppl", "icae_table6_ppl", {"name": "hf", "label": "llama2_7b"}, ROWS)
    recs = {(r["cell"], r["metric"]): r for r in T.table_report("icae_table6", [tmp_path], tmp_path / "t.md")["records"]}
    r = recs[("memory_slots", "PPL")]
    assert r["comparable"] and r["diff"] == pytest.approx(21.5 - 9.18)


def test_a_table_reading_a_training_loss_is_refused(tmp_path, monkeypatch):
    bad = yaml.safe_load((T.PAPERS_DIR / "lococo_pile.yaml").read_text())
    bad["metrics"] = {"eval loss": {"ours": "eval_loss"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    monkeypatch.setattr(T, "PAPERS_DIR", tmp_path)
    with pytest.raises(ReportError, match="training loss"):
        T.load_table("bad")


def test_every_stored_published_value_names_its_table_and_where_it_was_read():
    for name in T.table_names():
        t = T.load_table(name)
        if any(c.get("values") for c in t["cells"]):
            assert "Table" in t["source"]["table"] and t["source"].get("retrieved_from"), name
