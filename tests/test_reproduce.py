"""``python -m ctxbench reproduce``: the plan of every stored table, the dry run, resume, failures, bad input."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.core.paths import conf_dir
from ctxbench.report.tables import read_yaml, table_names
from ctxbench.reproduce import main as reproduce_main
from ctxbench.reproduce.plan import Options, ReproduceError, entries, plan
from ctxbench.reproduce.run import lane_env
from ctxbench.config.schemas import load_conf_file

EXPERIMENTS = {p.stem for p in (conf_dir() / "experiment").glob("*.yaml")}
FIRST = tuple(load_conf_file(conf_dir() / "reproduce.yaml").first)  # the longest rows of the CPU slice


def arg(step, key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in step.overrides if a.lstrip("+").startswith(key + "=")), None)


@pytest.mark.parametrize("scale", ["cpu", "paper"])
@pytest.mark.parametrize("table", table_names(None))
def test_plan_of_every_stored_table(table, scale, tmp_path):
    jobs, idle = plan(table, Options(scale=scale, out=tmp_path, train_steps=20 if scale == "cpu" else None))
    runnable = {e["cell"] for e in entries(read_yaml(table)) if e.get("experiment") and not e.get("not_comparable")
                and scale in e.get("scales", [scale])}  # a cell may run at some scales only (ruler's trained rows)
    cells = [c for j in jobs for c in j.cells]
    assert sorted(cells) == sorted(runnable) and len(cells) == len(set(cells))  # every cell once
    assert {c["cell"] for c in idle} == {e["cell"] for e in entries(read_yaml(table))} - runnable
    steps = [s for j in jobs for s in j.steps]
    assert len({s.run_dir for s in steps}) == len(steps)  # each run in its own folder, and once
    for job in jobs:
        made = set()
        for step in job.steps:
            ckpt = arg(step, "checkpoint")
            assert ckpt is None or Path(ckpt) in made, (job.name, step)  # trained before it is read, same lane
            if step.command == "train":
                made.add(step.run_dir)
                assert "trainer.resume=auto" in step.overrides
                assert ("trainer.max_steps=20" in step.overrides) == (scale == "cpu")
                assert step.run_dir.parent == tmp_path / "train"
            else:
                assert arg(step, "experiment") in EXPERIMENTS and step.run_dir.parent == tmp_path
            group = next(a for a in step.overrides if "scale/" in a).lstrip("+").split("=")
            assert group[1] in (("cpu",) if scale == "cpu" else ("paper", "full")), step
            assert (conf_dir() / group[0] / f"{group[1]}.yaml").exists()


def test_plan_shares_a_training_and_starts_the_longest_first(tmp_path):
    (job,), _ = plan("icae_table6", Options(scale="cpu", out=tmp_path))  # one pretraining, read by the ppl and AE runs
    assert [s.command for s in job.steps] == ["train", "eval", "eval"] and job.name == "memory_slots+autoencoding"
    (job,), _ = plan("icae_pwc", Options(scale="cpu", out=tmp_path))  # the fine-tuning starts from the pretraining
    assert [arg(s, "experiment") for s in job.steps] == ["icae_pwc_pretrain", "icae_pwc_finetune"]
    assert arg(job.steps[1], "checkpoint") == str(tmp_path / "train" / "icae_pwc_pretrain")
    jobs, _ = plan("locomo_all", Options(scale="cpu", out=tmp_path, first=FIRST))
    assert [j.name for j in jobs][:len(FIRST)] == list(FIRST) and len(jobs) == 17 and len(FIRST) >= 4
    ccm, _ = plan("ccm_metaicl", Options(scale="cpu", out=tmp_path))  # no train experiment: the method, on the cell's scale
    assert ccm[0].steps[0].overrides[:2] == ("method=ccm_concat", "+scale/ccm_table23=cpu")
    trained = {"icae_pwc_finetune": "/ck"}  # a trained run given: no training
    jobs, _ = plan("locomo_all", Options(scale="cpu", out=tmp_path, cells=("icae",), checkpoints=trained))
    assert [s.argv()[:2] for s in jobs[0].steps] == [["eval", "experiment=locomo_all_icae"]]
    assert arg(jobs[0].steps[0], "checkpoint") == "/ck"


def test_every_method_training_composes():
    """The trainings no experiment test composes: CCM's MetaICL / DailyDialog cells train ``method=`` on their scale."""
    from ctxbench.__main__ import check_overrides

    seen = {(s.command, s.overrides) for t in ("ccm_metaicl", "ccm_dailydialog") for scale in ("cpu", "paper")
            for j in plan(t, Options(scale=scale, out=Path("/tmp/x")))[0] for s in j.steps if arg(s, "method")}
    assert len(seen) == 8
    for command, overrides in sorted(seen):
        check_overrides(command, list(overrides))


def cfg_of(tmp_path: Path, *overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        return compose(config_name="reproduce", overrides=[f"out={tmp_path}", "progress=false", *overrides])


class FakeCells:
    """A runner that finishes each step at once (writes its done file), failing the cells it is told to."""

    def __init__(self, fail: tuple[str, ...] = ()):
        self.fail, self.ran = fail, []

    def __call__(self, step, prefix, log, env):
        self.ran.append(step.run_dir.name)
        if step.run_dir.name in self.fail:
            print("ctxbench: error: the fake cell failed", file=log)
            return 3
        step.run_dir.mkdir(parents=True)
        (step.run_dir / ("train_summary.json" if step.command == "train" else "results.json")).write_text("{}")
        return 0


def test_resume_skips_finished_cells_and_lists_failed_ones(tmp_path, capsys):
    failing = FakeCells(fail=("memgpt", "readagent"))
    cfg = cfg_of(tmp_path, "table=amem_locomo_table1", "jobs=2")
    with pytest.raises(ReproduceError, match=r"cells failed: .*memgpt \(exit 3\).*readagent \(exit 3\).*a rerun resumes"):
        reproduce_main(cfg, runner=failing)
    assert sorted(failing.ran) == ["amem", "locomo", "memgpt", "memorybank", "readagent"]
    err = capsys.readouterr().err
    assert "!! memgpt failed (exit 3)" in err and "(ctxbench: error: the fake cell failed)" in err
    assert "== finished, skipped" not in (tmp_path / "logs" / "amem.log").read_text()
    again = FakeCells()
    result = reproduce_main(cfg, runner=again)  # the rerun runs only what did not finish, then reports
    assert sorted(again.ran) == ["memgpt", "readagent"]
    assert "== finished, skipped:" in (tmp_path / "logs" / "amem.log").read_text()
    assert result["path"] == tmp_path / "amem_locomo_table1.md" and result["path"].exists()
    out = capsys.readouterr().out
    assert out.startswith("# A-Mem Table 1") and f"report: wrote {tmp_path / 'amem_locomo_table1.md'}" in out


def test_trainings_run_once_before_the_evals_that_read_them(tmp_path):
    runner = FakeCells()
    reproduce_main(cfg_of(tmp_path, "table=icae_table6"), runner=runner)
    assert runner.ran == ["icae_pwc_pretrain", "memory_slots", "autoencoding"]
    rerun = FakeCells()
    reproduce_main(cfg_of(tmp_path, "table=icae_table6"), runner=rerun)
    assert rerun.ran == []


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    (tmp_path / "train" / "lococo_pile_lococo").mkdir(parents=True)
    (tmp_path / "train" / "lococo_pile_lococo" / "train_summary.json").write_text(json.dumps({}))
    assert reproduce_main(cfg_of(tmp_path, "table=lococo_pile", "dry_run=true"), runner=FakeCells(fail=("*",))) is None
    out = capsys.readouterr().out
    assert f"reproduce lococo_pile (scale=cpu) into {tmp_path}: 3 job(s)" in out
    assert "(finished) " in out and "train experiment=lococo_pile_lococo scale/lococo=cpu trainer.max_steps=20" in out
    assert f"checkpoint={tmp_path}/train/lococo_pile_lococo" in out and "[streamingllm] cells: streamingllm, full_cache" in out
    assert "not run: claim_4k_to_32k (an abstract claim" in out
    assert f"then: python -m ctxbench report table=lococo_pile runs={tmp_path}" in out
    assert not (tmp_path / "logs").exists()


def test_dry_run_through_the_cli(cli, tmp_path):
    """The one subprocess: the command line as typed (scale= reaches table_scale), the paper scale's steps."""
    r = cli("reproduce", "table=locomo_all", "scale=paper", f"out={tmp_path}", "cells=[icae,rag]", "dry_run=true",
            "launch=accelerate launch -m ctxbench")
    assert r.returncode == 0, r.stderr
    assert "scale/icae_pretrain=paper" in r.stdout and "scale/locomo_all=full" in r.stdout
    assert "accelerate launch -m ctxbench train experiment=icae_pwc_pretrain" in r.stdout
    assert "max_steps" not in r.stdout and "[rag] cells: rag" in r.stdout and "[amem]" not in r.stdout


@pytest.mark.parametrize("overrides,expect", [
    (("table=amem_locomo_tabel1",), "unknown table 'amem_locomo_tabel1'. Did you mean 'amem_locomo_table1'"),
    (("table=amem_locomo_table1", "table_scale=papr"), "unknown scale 'papr'. Did you mean 'paper'"),
    (("table=amem_locomo_table1", "cells=[amme]"), "table amem_locomo_table1 has no cell 'amme'. Did you mean 'amem'"),
    (("table=amem_locomo_table1", "jobs=0"), "jobs=0: run at least 1 job at a time"),
    (("table=icae_table6", "train_steps=0"), "train_steps=0: train at least 1 step"),
    ((), "reproduce needs table=NAME: one of amem_dialsim_table2"),
])
def test_bad_input_is_refused_before_anything_runs(tmp_path, overrides, expect):
    with pytest.raises(ReproduceError) as e:
        reproduce_main(cfg_of(tmp_path, *overrides), runner=FakeCells(fail=("*",)))
    assert expect in str(e.value)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("argv,expect", [
    (("table=amem_locomo_table1", "scale=papr"), "ctxbench: error: unknown scale 'papr'. Did you mean 'paper'"),
    (("table=amem_locomo_table1", "jbos=2"), "ctxbench: error: unknown config key 'jbos'"),
])
def test_bad_input_is_one_line_on_the_command_line(monkeypatch, capsys, tmp_path, argv, expect):
    from ctxbench.__main__ import main

    argv = ("reproduce", *argv, f"out={tmp_path}", "dry_run=true")
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(expect)


def test_each_lane_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert lane_env(2)["OMP_NUM_THREADS"] == "2" and lane_env(8)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert lane_env(2)["OMP_NUM_THREADS"] == "3"


@pytest.mark.slow
def test_a_real_cell_end_to_end_and_its_resume(cli, tmp_path):
    """SmolLM2 on 2 questions of the shipped sample (the full-context cell), the table printed; a rerun skips it."""
    args = ("reproduce", "table=amem_locomo_table1", "cells=[locomo]", f"out={tmp_path}", "overrides=['limit=2']")
    r = cli(*args, timeout=900)
    assert r.returncode == 0, r.stderr + (tmp_path / "logs" / "locomo.log").read_text()
    assert (tmp_path / "locomo" / "results.json").exists()
    assert "# A-Mem Table 1" in r.stdout and f"run `{tmp_path / 'locomo'}` (scale=cpu)" in r.stdout
    again = cli(*args, timeout=300)
    assert again.returncode == 0 and "== finished, skipped:" in (tmp_path / "logs" / "locomo.log").read_text()
