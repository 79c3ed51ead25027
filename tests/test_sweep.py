"""Sweep configs: each sets hydra.sweeper.params; a real tiny multirun is collected by ``report sweep=``."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from conftest import run_cli

CONF = Path(__file__).resolve().parents[1] / "conf"
SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
# sweep → (host command, the group it selects, the swept key)
EXPECTED = {"icae_lambda": ("train", "method", "method.lambda_ae"),
            "icae_mem_size": ("train", "method", "method.mem_size"),
            "icae_compression": ("train", "method", "method.compression_rate"),
            "memory_k": ("eval", "memory", "memory.k"),
            "lococo_mem_size": ("train", "method", "method.mem_size")}


def test_every_sweep_is_known():
    assert set(SWEEPS) == set(EXPECTED)


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_sets_sweeper_params_on_real_config_keys(name):
    host, group, key = EXPECTED[name]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name=host, overrides=[f"+sweep={name}"], return_hydra_config=True)
        params = dict(cfg.hydra.sweeper.params)
        assert key in params and len(str(params[key]).split(",")) >= 4
        option = params[group]
        # the swept key exists in the selected group's config (a typo would only fail at run time)
        chosen = compose(config_name=host, overrides=[f"{group}={option}"])
    leaf = key.split(".", 1)[1]
    assert leaf in chosen[group], f"{name}: {key} is not a key of {group}={option}"


def test_real_tiny_multirun_then_report(tmp_path):
    sweep = tmp_path / "sw"
    p = run_cli("train", "-m", "method=lm", "model=tiny", "trainer.max_steps=2", "trainer.lr=1e-3,3e-3",
                "trainer.progress=false", f"hydra.sweep.dir={sweep}", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    jobs = sorted(d.name for d in sweep.iterdir() if d.is_dir())
    assert jobs == ["0", "1"]  # short job folders; swept values live in .hydra/overrides.yaml
    p = run_cli("report", f"sweep={sweep}")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "swept: trainer.lr" in p.stdout and "plotted metric: `eval_loss`" in p.stdout
    md = (sweep / "sweep.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| 0 |") or ln.startswith("| 1 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["0.001", "0.003"]
    assert all(float(r.split("|")[5]) > 0 for r in rows)  # eval_loss column, a real loss
    assert (sweep / "sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # ~20 s alone, more on a busy machine; test_real_tiny_multirun_then_report covers the path
def test_real_icae_lambda_sweep_file(tmp_path):
    """``train -m +sweep=icae_lambda`` runs ICAE (the file selects it) over the λ values given."""
    sweep = tmp_path / "lam"
    p = run_cli("train", "-m", "+sweep=icae_lambda", "model=tiny", "method.lambda_ae=0.2,0.8",
                "trainer.max_steps=1", "trainer.progress=false", f"hydra.sweep.dir={sweep}", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    p = run_cli("report", f"sweep={sweep}", "metric=lm_loss")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "swept: method.lambda_ae" in p.stdout and "`method=icae`" in p.stdout
    assert "| 0 | 0.2 |" in p.stdout and "| 1 | 0.8 |" in p.stdout
