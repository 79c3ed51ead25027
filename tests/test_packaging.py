"""A normal install is complete: the wheel (and ``pip install .``) ships the configs, the samples and the
paper tables inside ``ctxbench``, has no top-level ``conf``, and the installed copy runs ``ls``, a tiny
``train``, ``eval`` and ``report table=`` from a folder that is not the repo.

The source is copied to a temporary folder first so the build leaves no ``build/`` or ``*.egg-info``
in the checkout; ``--no-build-isolation`` because the tests run offline (setuptools is in the venv).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import TINY_ANSWERS

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "ctxbench"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def pip(*args: str, cwd: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", *args, "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--disable-pip-version-check"],
                       cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def package_files(root: Path) -> set[str]:
    """Every file of the ``ctxbench`` package under ``root``, as posix paths relative to ``root``."""
    return {p.relative_to(root).as_posix() for p in (root / "ctxbench").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The source copied to src/, its wheel in dist/, the wheel installed into site/, a cwd/ elsewhere."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(PKG, src / "ctxbench", ignore=IGNORE)
    pip("wheel", "-w", str(tmp / "dist"), ".", cwd=src)
    (wheel,) = (tmp / "dist").glob("ctxbench-*.whl")
    pip("install", "--target", str(tmp / "site"), str(wheel), cwd=tmp)
    (tmp / "cwd").mkdir()
    return {"tmp": tmp, "src": src, "wheel": wheel, "site": tmp / "site", "cwd": tmp / "cwd"}


def run_installed(built: dict[str, Path], *args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python -m ctxbench ARGS`` (or ``exe ARGS``) on the installed copy, run from cwd/ (not the repo)."""
    env = {**os.environ, "PYTHONPATH": str(built["site"]), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    cmd = (exe or [sys.executable, "-m", "ctxbench"]) + list(args)
    return subprocess.run(cmd, cwd=built["cwd"], env=env, capture_output=True, text=True, timeout=300)


def test_wheel_has_package_data_and_no_top_level_conf(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"ctxbench", "ctxbench-0.1.0.dist-info"}, f"unexpected top-level entries: {tops}"
    assert not any(n.startswith("conf/") for n in names)
    data = {f for f in package_files(REPO) if not f.endswith(".py")}  # every non-Python file the package holds
    for must in ("ctxbench/conf/train.yaml", "ctxbench/conf/model/tiny.yaml", "ctxbench/conf/dataset/text_sample.yaml",
                 "ctxbench/samples/text_sample.txt", "ctxbench/samples/locomo_sample.json",
                 "ctxbench/samples/dialsim_sample.pickle", "ctxbench/report/papers/amem_locomo_table1.yaml"):
        assert must in data
    assert data <= names, f"missing from the wheel: {sorted(data - names)}"


def test_pip_install_dot_installs_the_same_files(built):
    target = built["tmp"] / "site_dot"
    pip("install", "--target", str(target), ".", cwd=built["src"])
    assert package_files(target) == package_files(built["site"])
    assert not (target / "conf").exists()


def test_installed_copy_finds_its_own_files(built):
    code = ("import ctxbench, json; from ctxbench.core.paths import conf_dir, samples_dir, source_root; "
            "from ctxbench.data.paths import data_root, resolve; "
            "print(json.dumps({'pkg': ctxbench.__file__, 'conf': str(conf_dir()), 'samples': str(samples_dir()), "
            "'root': source_root(), 'data': str(data_root()), "
            "'sample': str(resolve('data/samples/text_sample.txt'))}))")
    r = run_installed(built, exe=[sys.executable, "-c", code])
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    site = built["site"].resolve()
    assert Path(got["pkg"]).resolve() == site / "ctxbench" / "__init__.py"  # not the editable checkout
    assert Path(got["conf"]) == site / "ctxbench" / "conf" and Path(got["samples"]) == site / "ctxbench" / "samples"
    assert Path(got["sample"]) == site / "ctxbench" / "samples" / "text_sample.txt"
    assert got["root"] is None and site not in Path(got["data"]).parents  # downloads never go into site-packages


def test_installed_console_script_ls(built):
    r = run_installed(built, "ls", exe=[str(built["site"] / "bin" / "ctxbench")])
    assert r.returncode == 0, r.stderr
    for word in ("text_sample", "locomo_sample", "tiny", "amem_locomo_table1_amem"):
        assert word in r.stdout


def test_installed_tiny_train_on_the_shipped_sample(built):
    out = built["tmp"] / "train"
    r = run_installed(built, "train", "model=tiny", "method=lm", "method.seq_len=32", "trainer.max_steps=2",
                      "trainer.progress=false", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "done: 2 steps" in r.stdout
    assert json.loads((out / "train_summary.json").read_text())
    hydra_cfg = (out / ".hydra" / "config.yaml").read_text()
    assert "data/samples/shakespeare_sample.txt" in hydra_cfg  # the default dataset: the shipped sample


def test_installed_tiny_eval_on_locomo_sample(built):
    out = built["tmp"] / "eval"
    r = run_installed(built, "eval", "memory=no_context", "llm=hf", "llm.model=tiny", "dataset=locomo_sample", TINY_ANSWERS,
                      "limit=2", "progress=false", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{built['site'] / 'ctxbench' / 'samples' / 'locomo_sample.json'}" in r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == 2 and res["health"]["status"] == "ok"
    assert res["git"] == {"commit": None, "dirty": None}  # an installed copy is not a source checkout


def test_installed_report_table_finds_the_paper(built):
    out, runs = built["tmp"] / "report" / "amem.md", built["tmp"] / "no_runs"
    runs.mkdir()
    r = run_installed(built, "report", "table=amem_locomo_table1", f"runs={runs}",
                      f"out={out}", f"hydra.run.dir={built['tmp'] / 'report'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert out.read_text().startswith("# A-Mem Table 1")
