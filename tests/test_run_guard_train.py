"""``train`` binds its run folder to its config: a resume with another learning rate is refused."""
from __future__ import annotations

import json

BASE = ["train", "method=lm", "model=tiny", "trainer.progress=false", "trainer.max_steps=4", "trainer.save_every=2"]


def test_train_resume_with_another_config_is_refused(cli, tmp_path):
    run = tmp_path / "run"
    r = cli(*BASE, "trainer.stop_after=2", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    p = cli(*BASE, "trainer.lr=0.5", "trainer.resume=auto", f"hydra.run.dir={run}")
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == (
        f"ctxbench: error: {run} was run with a different config: trainer.lr 0.003 → 0.5 "
        "(use a new hydra.run.dir, or pass force_resume=true to reuse it)")
    assert max(json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()) == 2
    ok = cli(*BASE, "trainer.resume=auto", f"hydra.run.dir={run}")  # resume / stop_after may change
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "resumed from" in ok.stdout + ok.stderr
