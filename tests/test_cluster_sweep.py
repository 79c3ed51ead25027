"""Sweeps through Hydra's launchers: submitit (SLURM, and its local executor) and joblib.

Real 2-point multiruns of ``train method=lm model=tiny trainer.max_steps=2``: each point must run as
its own job (its own process, folder, config and checkpoint). ``hydra/launcher=slurm`` runs through
the real sbatch script submitit writes from conf/hydra/launcher/slurm.yaml, handed to stand-ins for
``sbatch``/``srun``/``sacct`` (this machine has no SLURM): the stand-in sbatch runs each array task
of the script here, with the SLURM_* variables a cluster sets.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import run_cli

CONF = Path(__file__).resolve().parents[1] / "conf"
POINT = ["train", "-m", "method=lm", "model=tiny", "trainer.max_steps=2", "trainer.progress=false",
         "trainer.save_every=0", "trainer.lr=1e-3,3e-3"]


def finished_points(sweep: Path) -> dict[str, dict]:
    """Each job folder of a finished sweep → its composed config; checks that the job trained to the end."""
    jobs = sorted(d.name for d in sweep.iterdir() if d.is_dir() and not d.name.startswith("."))
    assert jobs == ["0", "1"], jobs
    out = {}
    for j in jobs:
        d = sweep / j
        summary = json.loads((d / "train_summary.json").read_text())
        assert summary["step"] == 2 and summary["run_dir"] == str(d)
        assert (d / "checkpoints" / "step_0000002").is_dir()
        rows = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "loss" in r] == [1, 2]
        out[j] = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
        assert yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())[-1] == \
            f"trainer.lr={out[j]['trainer']['lr']}"
    assert sorted(c["trainer"]["lr"] for c in out.values()) == [1e-3, 3e-3]  # one point each
    return out


def launcher_of(sweep: Path) -> dict:
    return yaml.safe_load((sweep / "multirun.yaml").read_text())["hydra"]["launcher"]


def run_sweep(tmp_path: Path, launcher: str):
    """A real 2-point sweep through ``hydra/launcher=<launcher>``: (sweep dir, the finished run)."""
    sweep = tmp_path / "sw"
    p = run_cli(*POINT, f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}", timeout=300,
                env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    finished_points(sweep)
    return sweep, p


@pytest.mark.distributed  # multi-process sweeps: run by `make test-distributed` (CI)
def test_submitit_local_runs_each_point_as_its_own_job(tmp_path):
    sweep, _ = run_sweep(tmp_path, "submitit_local")
    assert launcher_of(sweep)["_target_"].endswith("submitit_launcher.LocalLauncher")
    jobs = [d for d in (sweep / ".submitit").iterdir() if d.name != "%j"]
    assert len(jobs) == 2 and all(list(d.glob("*_result.pkl")) for d in jobs)  # two submitit jobs, each done


@pytest.mark.distributed  # multi-process sweeps: run by `make test-distributed` (CI)
def test_parallel_launcher_runs_points_in_worker_processes(tmp_path):
    sweep, p = run_sweep(tmp_path, "parallel")
    launcher = launcher_of(sweep)
    assert launcher["_target_"].endswith("joblib_launcher.JoblibLauncher") and launcher["n_jobs"] == 2
    assert "Joblib.Parallel(n_jobs=2" in p.stdout + p.stderr


# ---- SLURM -----------------------------------------------------------------------------------------

FAKE_SBATCH = r"""#!/bin/bash
# stand-in for SLURM's sbatch: runs every array task of the script on this machine, in the background
script="$1"; jid=$$
last=$(sed -n 's/^#SBATCH --array=0-\([0-9]*\).*/\1/p' "$script")
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
for i in $(seq 0 "${last:-0}"); do
  if [ -n "$last" ]; then id="${jid}_$i"; arr="SLURM_ARRAY_JOB_ID=$jid SLURM_ARRAY_TASK_ID=$i"
  else id="$jid"; arr=""; fi
  d=$(dirname "$out"); d="${d//%A/$jid}"; d="${d//%a/$i}"; d="${d//%j/$id}"
  (  # submitit writes the task's pickle after sbatch returns: wait for it, as a queued job would
    for _ in $(seq 600); do [ -e "$d/${id}_submitted.pkl" ] && break; sleep 0.2; done  # at most 2 min
    env $arr SLURM_JOB_ID="$jid$i" SLURM_NTASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 \
      SLURM_JOB_NUM_NODES=1 SLURM_JOB_NODELIST=localhost SLURM_CPUS_PER_TASK=1 bash "$script"
  ) > "$script.$i.log" 2>&1 < /dev/null &
done
echo "Submitted batch job $jid"
"""
FAKE_SRUN = r"""#!/bin/bash
# stand-in for srun: drop its options, run the command (one task)
while [ $# -gt 0 ]; do case "$1" in --output|--error) shift 2;; --*) shift;; *) break;; esac; done
exec "$@"
"""
FAKE_SACCT = """#!/bin/bash
echo 'JobID|State|NodeList'
"""


@pytest.fixture
def fake_slurm(tmp_path) -> dict[str, str]:
    """PATH with stand-ins for sbatch, srun and sacct (tests only: there is no SLURM here)."""
    bin_dir = tmp_path / "slurm_bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("sacct", FAKE_SACCT)):
        f = bin_dir / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}


@pytest.mark.distributed  # multi-process sweeps: run by `make test-distributed` (CI)
def test_slurm_launcher_submits_a_job_array_whose_tasks_train(tmp_path, fake_slurm):
    sweep = tmp_path / "sw"
    p = run_cli(*POINT, "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}", timeout=300, env=fake_slurm)
    assert p.returncode == 0, p.stderr[-3000:]
    configs = finished_points(sweep)
    assert launcher_of(sweep)["_target_"].endswith("submitit_launcher.SlurmLauncher")
    tasks = sorted(d.name for d in (sweep / ".submitit").iterdir() if d.is_dir() and "_" in d.name)
    assert len(tasks) == 2 and tasks[0].endswith("_0") and tasks[1].endswith("_1")  # one array, two tasks
    for j in configs:  # each job knew its SLURM array task id (submitit read the SLURM_* environment)
        hydra_cfg = yaml.safe_load((sweep / j / ".hydra" / "hydra.yaml").read_text())["hydra"]
        assert hydra_cfg["job"]["id"] in tasks and hydra_cfg["job"]["num"] == int(j)


def slurm_launcher(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="train", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True)
    return cfg.hydra.launcher


def sbatch_lines(launcher, monkeypatch, tmp_path) -> list[str]:
    """The ``#SBATCH`` lines submitit writes for this launcher config (as the plugin builds its executor)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    (tmp_path / "srun").write_text(FAKE_SRUN)  # submitit's SLURM executor looks for srun on PATH
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    params = OmegaConf.to_container(launcher, resolve=True)
    params.pop("_target_")
    ex = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                               slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    text = ex._executor._make_submission_file_text("true", "uid")
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]


def test_slurm_defaults_are_valid_sbatch_options(monkeypatch, tmp_path):
    for var in ("CTXBENCH_SLURM_PARTITION", "CTXBENCH_SLURM_ACCOUNT", "CTXBENCH_SLURM_QOS"):
        monkeypatch.delenv(var, raising=False)
    lines = sbatch_lines(slurm_launcher("hydra.sweep.dir=/shared/sw"), monkeypatch, tmp_path)
    for want in ("--partition=gpu", "--gpus-per-node=1", "--time=1440", "--nodes=1", "--ntasks-per-node=1",
                 "--cpus-per-task=8", "--mem=64GB", "--job-name=ctxbench-train", "--signal=USR2@120",
                 "--output=/shared/sw/.submitit/%j/%j_0_log.out"):
        assert f"#SBATCH {want}" in lines, (want, lines)
    assert not any("--account" in ln or "--qos" in ln for ln in lines)  # nothing site-specific by default


def test_slurm_site_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CTXBENCH_SLURM_PARTITION", "h100")
    monkeypatch.setenv("CTXBENCH_SLURM_ACCOUNT", "proj42")
    monkeypatch.setenv("CTXBENCH_SLURM_QOS", "high")
    lines = sbatch_lines(slurm_launcher("hydra.launcher.timeout_min=60"), monkeypatch, tmp_path)
    assert {"#SBATCH --partition=h100", "#SBATCH --account=proj42", "#SBATCH --qos=high",
            "#SBATCH --time=60"} <= set(lines)


def test_the_readme_lambda_sweep_composes_on_slurm():
    """docs/training.md's command: every λ point composes with the paper's trainer settings and the SLURM launcher."""
    from ctxbench.config.sweep import sweep_combinations

    base = ["experiment=icae_pwc_pretrain", "scale/icae_pretrain=paper", "method.lambda_ae=0.2,0.5,0.8"]
    combos = sweep_combinations(base)
    assert len(combos) == 3
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for combo, lam in zip(combos, (0.2, 0.5, 0.8)):
            cfg = compose(config_name="train", overrides=[*combo, "hydra/launcher=slurm"], return_hydra_config=True)
            assert cfg.method.lambda_ae == lam and cfg.model.label == "mistral_7b"
            assert cfg.trainer.precision == "bf16" and cfg.launcher.name == "deepspeed_zero2"
            assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    training_doc = (CONF.parent / "docs" / "training.md").read_text()
    assert "'method.lambda_ae=0.2,0.5,0.8' hydra/launcher=slurm" in training_doc
