"""Provenance in every results.json: package versions, platform, device, git commit and dirty state."""
from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.runs import results as R
from ctxbench.evaluation.evaluator import finalize
from ctxbench.metrics.base import build_metrics

ROOT = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    d = tmp_path / "repo"
    d.mkdir()
    _git(d, "init", "-q")
    (d / "a.py").write_text("x = 1\n")
    _git(d, "add", "a.py")
    _git(d, "commit", "-qm", "init")
    return d


def test_provenance_records_versions_platform_and_device():
    p = R.provenance()
    assert p["python"] == platform.python_version()
    assert set(p["packages"]) >= {"ctxbench", "torch", "transformers", "peft", "accelerate", "deepspeed",
                                  "datasets", "hydra-core", "sentence-transformers", "faiss-cpu"}
    for dist, version in p["packages"].items():
        try:
            assert version == importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            assert version is None
    assert p["packages"]["ctxbench"] == "0.1.0"
    assert p["platform"] == {"os": platform.system(), "release": platform.release(), "machine": platform.machine()}
    import torch

    p = R.provenance()
    if torch.cuda.is_available():
        assert p["device"]["type"] == "cuda" and p["device"]["name"] == torch.cuda.get_device_name(0)
    else:
        assert p["device"] == {"type": "cpu"}
    p["packages"]["torch"] = "mutated"
    assert R.provenance()["packages"]["torch"] != "mutated"  # callers get a copy of the cached record


def test_missing_package_is_none():
    assert R.package_version("surely-not-an-installed-distribution-xyz") is None


def test_device_info_names_the_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA Test GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    dev = R.device_info()
    assert dev["type"] == "cuda" and dev["name"] == "NVIDIA Test GPU" and dev["count"] == 2
    line = R.provenance_line({"provenance": {"device": dev}, "git": {}})
    assert "cuda NVIDIA Test GPU ×2" in line


def test_provenance_imports_neither_deepspeed_nor_torch():
    code = ("import json, sys; from ctxbench.runs.results import provenance; p = provenance(); "
            "print(json.dumps(['deepspeed' in sys.modules, 'torch' in sys.modules, p]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    deepspeed_imported, torch_imported, p = json.loads(out.stdout.strip().splitlines()[-1])
    assert deepspeed_imported is False and torch_imported is False
    assert p["packages"]["deepspeed"] == R.package_version("deepspeed")
    assert p["packages"]["torch"] == R.package_version("torch")  # version known without importing it
    assert p["device"] == {"type": "cpu", "torch_loaded": False}


@needs_git
def test_git_info_dirty_means_a_tracked_file_changed(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert R.git_info(repo) == {"commit": head, "dirty": False}
    (repo / "untracked.txt").write_text("scratch")
    assert R.git_info(repo)["dirty"] is False  # untracked files do not make a run dirty
    (repo / "a.py").write_text("x = 2\n")
    assert R.git_info(repo) == {"commit": head, "dirty": True}
    _git(repo, "add", "a.py")
    assert R.git_info(repo)["dirty"] is True  # staged but not committed is still dirty


@needs_git
def test_git_info_is_none_outside_ctxbench_own_work_tree(repo, tmp_path):
    # installed from a wheel: site-packages may sit inside someone else's repository, or in none
    site = repo / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    assert R.git_info(site) == {"commit": None, "dirty": None}
    bare = tmp_path / "no_repo"
    bare.mkdir()
    assert R.git_info(bare) == {"commit": None, "dirty": None}
    assert R.git_info(tmp_path / "does-not-exist") == {"commit": None, "dirty": None}


@needs_git
def test_git_info_of_this_checkout():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=R.REPO_ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("ctxbench is not a git checkout here")
    assert R.git_info()["commit"] == head.stdout.strip()


def test_finalize_writes_provenance_to_results_json_and_md(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "git_info", lambda root=None: {"commit": "abc1234def5678", "dirty": True})
    recs = [{"id": "q1", "prediction": "paris", "answer": "Paris", "category": 4},
            {"id": "q2", "prediction": "rome", "answer": "Paris", "category": 4}]
    finalize(tmp_path, recs, build_metrics(["f1"]), {"seed": 3}, "score", with_cost=False, progress=False)
    res = json.loads((tmp_path / "results.json").read_text())
    prov = res["provenance"]
    assert prov["packages"]["torch"] == importlib.metadata.version("torch")
    assert prov["python"] == platform.python_version() and prov["device"]["type"] in ("cpu", "cuda")
    assert res["git"] == {"commit": "abc1234def5678", "dirty": True}
    md = (tmp_path / "results.md").read_text()
    torch_v, tf_v = importlib.metadata.version("torch"), importlib.metadata.version("transformers")
    assert (f"Provenance: ctxbench 0.1.0 · python {platform.python_version()} · torch {torch_v} · "
            f"transformers {tf_v}") in md
    assert "· git abc1234 (dirty)" in md
