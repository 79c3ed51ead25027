"""python -m ctxbench.methods.icae_overfit: the three CLI runs of the overfit experiment (train, then the
passages trained on and as many held out decoded back), in-process; a 2-step run on the tiny model."""
from __future__ import annotations

import json

from ctxbench.methods.icae_overfit import commands, main


def test_the_three_command_lines_and_their_defaults():
    out, (train, on, held) = commands(["--", "trainer.max_steps=600"])
    assert str(out) == "outputs/icae_overfit"
    assert train == ["train", "experiment=icae_overfit", "dataset.path=../shared/data/tinyshakespeare.txt",
                     "hydra.run.dir=outputs/icae_overfit/train", "method.max_examples=2", "trainer.resume=auto",
                     "trainer.max_steps=600"]
    ev = ["eval", "task=reconstruction", "method=icae", "checkpoint=outputs/icae_overfit/train", "dataset=text",
          "dataset.path=../shared/data/tinyshakespeare.txt", "dataset.max_chars=40000", "task.lengths=[64]",
          "task.windows=2", "task.extra_tokens=0"]
    assert on == [*ev, "hydra.run.dir=outputs/icae_overfit/trained_on"]
    assert held == [*ev, "task.skip_tokens=4096", "hydra.run.dir=outputs/icae_overfit/held_out"]
    _, (train, on, _) = commands(["--text", "t.txt", "--passages", "32", "--out", "o"])
    assert "method.max_examples=32" in train and "dataset.path=t.txt" in on and "task.windows=32" in on


def test_a_failing_run_stops_with_its_exit_code(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--", "trainer.max_stepz=2"]) != 0
    assert "train failed" in capsys.readouterr().err
    assert not (tmp_path / "trained_on").exists()


def test_tiny_model_end_to_end(tmp_path, shared_data, capsys):
    text = shared_data / "tinyshakespeare.txt"
    rc = main(["--text", str(text), "--out", str(tmp_path), "--", "model=tiny", "trainer.max_steps=2",
               "trainer.save_every=2", "trainer.progress=false"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "== trained_on" in printed and "== held_out" in printed
    for d, skip in (("trained_on", 0), ("held_out", 4096)):
        res = json.loads((tmp_path / d / "results.json").read_text())
        (row,) = res["rows"]
        assert res["task"] == "reconstruction" and row["n"] == 2 and row["memory_slots"] == 16
        assert res["config"]["task"]["skip_tokens"] == skip
