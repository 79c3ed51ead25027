"""Small breaks a new user meets: lococo on short documents, score's missing file, ``--limit 3``, the λ sweep plot."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ctxbench.data.errors import DataError
from ctxbench.evaluation.evaluator import load_prediction_file
from ctxbench.report.sweep import sweep_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_lococo_on_short_documents_is_one_line(cli, tmp_path):
    r = cli("train", "method=lococo", "dataset=pile_sample", "model=tiny", "trainer.progress=false",
            f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxbench: error: method=lococo: no training document has 512 tokens "
                           "(method.segment_len=64 × method.n_segments=8); the longest has ")
    assert last.endswith("or a dataset of longer texts (dataset=shakespeare_sample)")


def test_missing_predictions_names_the_eval_output_not_a_download(tmp_path):
    with pytest.raises(DataError) as e:
        load_prediction_file(tmp_path / "nope.jsonl")
    msg = str(e.value)
    assert "download" not in msg and "dataset.path" not in msg
    assert msg == (f"{tmp_path / 'nope.jsonl'}: not found; predictions= takes the predictions.jsonl that "
                   "`python -m ctxbench eval` writes in its run folder (outputs/eval/<run>/predictions.jsonl, "
                   "or that folder)")


def test_predictions_may_be_the_eval_run_folder(tmp_path):
    rec = {"id": "q1", "prediction": "Paris", "answer": "Paris", "category": 1}
    (tmp_path / "predictions.jsonl").write_text(json.dumps(rec) + "\n")
    assert [r["id"] for r in load_prediction_file(tmp_path)] == ["q1"]
    with pytest.raises(DataError, match="a folder without predictions.jsonl"):
        load_prediction_file(tmp_path.parent)


@pytest.mark.parametrize("args, hint", [
    (["eval", "--limit", "3"], "'--limit 3': settings are key=value here (Hydra), not --key; write limit=3"),
    (["eval", "--limit=3"], "'--limit=3': settings are key=value here (Hydra), not --key; write limit=3"),
    (["train", "--trainer.max-steps", "5"], "write trainer.max_steps=5"),
    (["eval", "--memory", "rag"], "write memory=rag"),
    (["eval", "dataset=locomo_sample", "--limit"], "write limit=VALUE"),
])
def test_dashed_config_key_gets_a_one_line_hint(cli, args, hint):
    r = cli(*args)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxbench: error: ") and last.endswith(hint)
    assert "usage:" not in r.stderr  # not argparse's answer


def test_dashed_unknown_flag_is_left_to_hydra(cli):
    r = cli("eval", "--bogus", "3")
    assert r.returncode != 0 and "unrecognized arguments: --bogus" in r.stderr


def fake_icae_run(d: Path, lam: float, ae: float, lm: float, eval_loss: float) -> None:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["method=icae", f"method.lambda_ae={lam}"]))
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": 0}))
    rows = [{"step": 1, "loss": lam * ae + (1 - lam) * lm, "ae_loss": ae, "lm_loss": lm},
            {"step": 1, "final": True, "eval_loss": eval_loss}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_lambda_sweep_plots_ae_and_lm_losses_not_weighted_eval_loss(tmp_path):
    for i, (lam, ae, lm) in enumerate([(0.2, 2.0, 4.0), (0.8, 1.0, 5.0)]):
        fake_icae_run(tmp_path / f"{i}_method.lambda_ae={lam}", lam, ae, lm, eval_loss=lam * ae + (1 - lam) * lm)
    res = sweep_report(tmp_path)
    assert res["plotted"] == ["ae_loss", "lm_loss"] and res["metric"] == "ae_loss"
    md = (tmp_path / "sweep.md").read_text()
    assert "plotted metric: `ae_loss`, `lm_loss`" in md
    assert "`eval_loss` weights `ae_loss` and `lm_loss` by the swept `method.lambda_ae`" in md
    assert (tmp_path / "sweep.png").read_bytes().startswith(PNG_MAGIC)
    assert sweep_report(tmp_path, metric="eval_loss")["plotted"] == ["eval_loss"]  # asked for: plotted alone


def test_non_weight_sweep_still_plots_eval_loss(tmp_path):
    for i, lr in enumerate(("1e-3", "3e-3")):
        d = tmp_path / f"{i}_x"
        fake_icae_run(d, 0.5, 2.0, 4.0, eval_loss=3.0 + i)
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["method=icae", f"trainer.lr={lr}"]))
    assert sweep_report(tmp_path, plot=False)["plotted"] == ["eval_loss"]
