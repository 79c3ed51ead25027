"""``python -m ctxbench new memory|method|dataset|metric NAME``: a package whose files parse, whose entry
point names its class, and whose class passes ``check`` as written (loaded with ``plugins=``, no pip);
the pip install -e round trip (its own test, ``check`` and ``eval`` by its entry point) is the slow test."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from ctxbench.config import plugin_options
from ctxbench.core import registry
from tests.conftest import REPO, run_cli

NAMES = {"memory": "lastturns", "method": "lasttokens", "dataset": "tinyconv", "metric": "exactish"}


def forget_plugins() -> None:
    registry.forget_plugins()
    plugin_options.forget()
    for mod in [m for m in sys.modules if m.split(".")[0] in {f"{n}_pkg" for n in NAMES.values()}]:
        sys.modules.pop(mod)


@pytest.fixture(autouse=True)
def _clean_plugins():
    forget_plugins()
    yield
    forget_plugins()


def new(kind: str, out: Path) -> Path:
    name = NAMES[kind]
    r = run_cli("new", kind, name, f"out={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == f"new {kind} {name}: wrote {5 if kind in ('memory', 'dataset') else 4} files → {out}"
    return out


@pytest.mark.parametrize("kind", list(NAMES))
def test_new_writes_a_package_whose_files_parse(kind, tmp_path):
    out = new(kind, tmp_path / "pkg")
    name = NAMES[kind]
    meta = tomllib.loads((out / "pyproject.toml").read_text())
    obj = "load" if kind == "dataset" else "".join(p.capitalize() for p in name.split("_"))
    assert meta["project"]["entry-points"][f"ctxbench.{kind}"] == {name: f"{name}_pkg:{obj}"}
    assert meta["project"]["name"] == f"ctxbench-{name}" and meta["tool"]["setuptools"]["packages"] == [f"{name}_pkg"]
    for py in out.rglob("*.py"):
        tree = ast.parse(py.read_text(), str(py))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m and m.startswith("ctxbench") and m not in ("ctxbench.api", "ctxbench.check.pytest_plugin")}, py
    init = (out / f"{name}_pkg" / "__init__.py").read_text()
    assert f'register("{kind}", "{name}")' in init and "ctxbench_api = " in init
    if kind in ("memory", "method", "dataset"):
        assert "class Settings" in init
    if kind == "memory":
        assert "SCRIPTED = {SUMMARY_SYSTEM: _scripted_summary}" in (out / f"{name}_pkg" / "prompts.py").read_text()
    if kind == "dataset":
        assert len(json.loads((out / f"{name}_pkg" / "data.json").read_text())[0]["questions"]) == 3
    test = (out / "tests" / f"test_{name}.py").read_text()
    assert 'pytest_plugins = ["ctxbench.check.pytest_plugin"]' in test and f'ctxbench_check("{kind}", {obj}' in test


@pytest.mark.parametrize("kind,extra", [("memory", ["limit=6"]), ("dataset", []), ("metric", ["limit=4"]),
                                        ("method", ["limit=2", "method.max_new_tokens=4", "method.keep_tokens=32",
                                                    "checks=[contract,eval,usage]"])])
def test_the_written_class_passes_check_by_plugins(kind, extra, tmp_path, monkeypatch):
    out = new(kind, tmp_path / "pkg")
    monkeypatch.syspath_prepend(str(out))
    name = NAMES[kind]
    key = f"{kind}={name}"
    r = run_cli("check", key, f"plugins={name}_pkg", *extra, f"hydra.run.dir={tmp_path / 'run'}",
                env={"PYTHONPATH": os.pathsep.join([str(out), str(REPO)])})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " 0 failed" in r.stdout.splitlines()[-1], r.stdout
    if kind == "memory":
        assert "kill           pass" in r.stdout and "usage          pass" in r.stdout


def test_new_refuses_a_builtin_name_a_bad_name_and_a_full_folder(tmp_path):
    r = run_cli("new", "memory", "rag", f"out={tmp_path / 'a'}")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "ctxbench: error: new memory 'rag': ctxbench has a built-in memory of that name; choose another "
        "(a plug-in never shadows a built-in)")
    r = run_cli("new", "memory", "Last-Turns", f"out={tmp_path / 'b'}")
    assert r.returncode == 2 and "a plug-in name is lowercase letters, digits and _" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    r = run_cli("new", "metric", "exactish", f"out={tmp_path / 'full'}")
    assert r.returncode == 2 and "is not empty (choose another out=, or force=true to write into it)" in r.stderr
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["x.txt"]


@pytest.mark.slow
def test_new_then_pip_install_e_then_its_test_check_and_eval(tmp_path):
    """The round trip a plug-in author makes, timed: new → pip install -e (a scratch venv over this one's
    packages) → the package's own test → check and eval by its entry point (no plugins=)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    import site as here

    Path(site, "zz_parent_env.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n"
                                                       for p in here.getsitepackages()))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    out = tmp_path / "ctxbench-lastturns"
    steps = {}

    def step(what: str, *cmd: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess:
        t = time.perf_counter()
        r = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, env=env, timeout=900)
        steps[what] = round(time.perf_counter() - t, 1)
        assert r.returncode == 0, f"{what}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
        return r

    step("new", str(py), "-m", "ctxbench", "new", "memory", "lastturns", f"out={out}")
    step("pip install -e", str(py), "-m", "pip", "install", "-q", "-e", str(out))
    step("its test", str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=out)
    r = step("check", str(py), "-m", "ctxbench", "check", "memory=lastturns", "limit=6", f"hydra.run.dir={tmp_path / 'chk'}")
    assert "memory=lastturns: 7 passed, 0 failed, 1 skipped" in r.stdout
    step("eval", str(py), "-m", "ctxbench", "eval", "memory=lastturns", "dataset=locomo_sample", "llm.model=tiny",
         "max_failed_fraction=1", "limit=4", "progress=false", f"hydra.run.dir={tmp_path / 'eval'}")
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert res["system"] == "memory=lastturns" and res["overall"]["n"] == 4
    print(f"new → pip install -e → its test → check → eval: {time.perf_counter() - t0:.1f} s {steps}")
