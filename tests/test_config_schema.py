"""Typed configs: a wrong type or an unknown key fails at compose time, in one line, before anything runs.

Through the real CLI (exit code 2, one stderr line, no traceback, no run folder created, so nothing
was loaded) and, for the many cases, through ``check_overrides`` in-process.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.__main__ import check_overrides
from ctxbench.config.sweep import sweep_combinations
from ctxbench.config.schema import ConfigTypeError, check_types, schema

CONF = Path(__file__).resolve().parents[1] / "conf"


def refused(capsys, command: str, *argv: str) -> str:
    """The one-line error ``check_overrides`` prints (and its exit code 2)."""
    with pytest.raises(SystemExit) as e:
        check_overrides(command, list(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("command,override,key,expected,shown", [
    ("train", "trainer.max_steps=abc", "trainer.max_steps", "int", "'abc'"),
    ("eval", "memory.k=ten", "memory.k", "int", "'ten'"),
    ("eval", "limit=abc", "limit", "int or null", "'abc'"),
    ("train", "trainer.lr=fast", "trainer.lr", "float", "'fast'"),
    ("train", "seed=1.5", "seed", "int", "1.5"),
    ("eval", "progress=maybe", "progress", "bool", "'maybe'"),
])
def test_wrong_type_fails_in_one_line_through_the_cli(cli, tmp_path, command, override, key, expected, shown):
    run_dir = tmp_path / "run"
    extra = ["memory=amem"] if key.startswith("memory.") else []
    t0 = time.monotonic()
    r = cli(command, *extra, override, f"hydra.run.dir={run_dir}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"ctxbench: error: config key {key!r} must be {expected}, got {shown}"
    assert "Traceback" not in r.stderr
    assert not run_dir.exists()  # Hydra never started the job: no model, no data was loaded
    assert time.monotonic() - t0 < 60


def test_unknown_key_suggests_through_the_cli(cli, tmp_path):
    r = cli("train", "trainer.max_step=5", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    want = "ctxbench: error: unknown config key 'trainer.max_step'. Did you mean 'trainer.max_steps'?"
    assert r.stderr.strip() == want
    r = cli("eval", "memory=amem", "memory.kk=3", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    assert r.stderr.strip() == "ctxbench: error: unknown config key 'memory.kk'. Did you mean 'memory.k'?"
    assert not (tmp_path / "run").exists()


def test_multirun_checks_every_swept_value_before_any_job(cli, tmp_path):
    sweep_dir = tmp_path / "sweep"
    r = cli("eval", "-m", "memory=amem", "memory.k=10,20,x", f"hydra.sweep.dir={sweep_dir}")
    assert r.returncode == 2, r.stderr
    want = "ctxbench: error: config key 'memory.k' must be int, got 'x' (in the sweep job memory.k=x)"
    assert r.stderr.strip() == want
    assert not sweep_dir.exists()  # not even the first job (k=10) ran


def test_multirun_checks_every_combination(capsys):
    """readagent has no ``k``: only the combination memory=readagent fails."""
    err = refused(capsys, "eval", "-m", "memory=rag,readagent", "memory.k=5")
    assert "unknown config key 'memory.k'" in err and "(in the sweep job memory=readagent)" in err


def test_multirun_sweep_functions_pass_through(capsys):
    check_overrides("train", ["-m", "method=glob(lococo*)", "method.mem_size=range(32,65,32)",
                              "trainer.lr=interval(0.0001,0.1)", "trainer.batch_size=choice(1,2)"])
    check_overrides("eval", ["--multirun", "memory=amem", "memory.k=10,20,30"])
    err = refused(capsys, "train", "-m", "method=glob(lococo*)", "method.mem_size=abc")
    assert "config key 'method.mem_size' must be int or null, got 'abc' (in the sweep job method=lococo)" in err
    err = refused(capsys, "train", "-m", "method=lococo", "method.mem_size=range(1,3)", "method.kernel_size=1,x")
    assert "'method.kernel_size' must be int, got 'x'" in err


def test_glob_expands_over_the_group_options():
    combos = sweep_combinations(["method=glob(lococo*)", "seed=1,2"])
    assert combos == [["method=lococo", "seed=1"], ["method=lococo", "seed=2"],
                      ["method=lococo_paper", "seed=1"], ["method=lococo_paper", "seed=2"]]


def test_a_large_sweep_is_checked_one_value_at_a_time():
    combos = sweep_combinations(["seed=range(0,10)", "trainer.lr=range(1,10)", "trainer.max_steps=1,x"])
    assert len(combos) == 10 + 9 + 2  # not 180
    assert ["seed=0", "trainer.lr=1", "trainer.max_steps=x"] in combos


@pytest.mark.parametrize("command,argv", [
    ("train", ["trainer.lr=1"]),                                   # int → float
    ("eval", ["limit=null", "limit=5"]),                            # an Optional key
    ("train", ["method=icae", "method.max_segments=null"]),         # null documented for a non-null default
    ("train", ["method=lococo_paper", "method.rope_scaling_factor=2.0"]),  # float or 'auto'
    ("train", ["trainer.max_steps=${seed}"]),                       # interpolations still work
    ("eval", ["dataset.categories=[1,4]", "dataset.conversations=[conv-26]"]),
    ("train", ["dataset=text_sample", "+dataset.extra=abc"]),      # added keys are the user's own
    ("train", ["method=lm", "method.lora=null"]),                   # a mapping may be switched off
    ("data", ["action=stats", "name=locomo_sample", "+dataset.limit=5"]),
    ("report", ["runs=[a,b]"]),
    ("train", ["--cfg", "job", "trainer.lr=2"]),
])
def test_valid_overrides_pass(command, argv):
    check_overrides(command, argv)


def test_cfg_flag_is_checked_too(capsys):
    err = refused(capsys, "train", "--cfg", "job", "trainer.max_steps=abc")
    assert "'trainer.max_steps' must be int" in err


def test_a_wrongly_typed_interpolation_fails(capsys):
    err = refused(capsys, "train", "trainer.max_steps=${method.name}")
    assert err == "ctxbench: error: config key 'trainer.max_steps' must be int, got 'lm'"


def test_null_for_a_required_key_fails(capsys):
    err = refused(capsys, "train", "trainer.max_steps=null")
    assert err == "ctxbench: error: config key 'trainer.max_steps' must be int, got null"


def test_an_experiment_file_is_checked_as_well(tmp_path):
    """A wrong type set by a YAML (not the command line) is caught the same way."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=["memory=amem"])
    cfg.memory.k = "ten"
    with pytest.raises(ConfigTypeError, match="'memory.k' must be int, got 'ten'"):
        check_types(cfg, "eval")


def test_every_key_has_a_type():
    """Every schema key names what it takes (its annotation), so the check can refuse a wrong type."""
    missing = []
    for command in sorted(p.stem for p in CONF.glob("*.yaml")):
        missing += [f"{command}: {k}" for k, kt in schema(command).items() if not kt.types]
    assert not missing, f"keys with no type (annotate them in ctxbench/config/schemas/): {missing}"
    assert len(schema("train")) > 250  # the walk sees every group's schemas (some 290 keys)


def test_a_sweep_file_is_expanded_like_the_command_line(capsys):
    """``+sweep=memory_k`` sweeps memory.k over amem; with memory=readagent (no k) every job would fail."""
    check_overrides("eval", ["-m", "+sweep=memory_k"])
    err = refused(capsys, "eval", "-m", "+sweep=memory_k", "memory=readagent")
    assert "unknown config key 'memory.k'" in err and "(in the sweep job memory.k=10)" in err


def test_group_choice_check_lets_sweep_functions_through(capsys):
    from ctxbench.__main__ import check_group_choices

    check_group_choices(["-m", "method=glob(lococo*)", "memory=choice(rag,amem)"])
    with pytest.raises(SystemExit):
        check_group_choices(["-m", "method=lococo,lcoco"])
    assert "unknown method 'lcoco'" in capsys.readouterr().err
