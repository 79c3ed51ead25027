"""The CLI as a user types it: ls, --help, --cfg, typos, bad keys, bad paths."""
from __future__ import annotations


def test_ls_lists_every_kind(cli):
    r = cli("ls")
    assert r.returncode == 0, r.stderr
    for word in ("model:", "method:", "dataset:", "metric:", "smollm2_135m", "lm", "text_sample"):
        assert word in r.stdout


def test_unknown_group_option_suggests(cli):
    r = cli("train", "method=lmm")
    assert r.returncode == 2
    assert "unknown method 'lmm'" in r.stderr and "Did you mean 'lm'" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_command_suggests(cli):
    r = cli("trian")
    assert r.returncode == 2 and "Did you mean 'train'" in r.stderr


def test_unknown_key_is_one_line(cli):
    r = cli("train", "trainer.lrr=0.1")
    assert r.returncode == 2
    assert "unknown config key 'trainer.lrr'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_model_path_is_one_line(cli, tmp_path):
    r = cli("train", "model=hf", f"model.path={tmp_path / 'nope'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    assert "model.path=" in r.stderr and "Traceback" not in r.stderr


def test_unreadable_dataset_is_one_line(cli, tmp_path):
    r = cli("train", "model=tiny", "dataset=text", f"dataset.path={tmp_path / 'missing.txt'}",
            f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    assert "missing.txt" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    r = cli("train", "model=tiny", "dataset=text", f"dataset.path={bad}", f"hydra.run.dir={tmp_path / 'run2'}")
    assert r.returncode == 2 and "bad.txt" in r.stderr and "UTF-8" in r.stderr


def test_cfg_job_prints_config(cli):
    r = cli("train", "method=lm", "model=tiny", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert "trainer:" in r.stdout and "name: tiny" in r.stdout


def test_help(cli):
    r = cli("train", "--help")
    assert r.returncode == 0 and "method" in r.stdout
