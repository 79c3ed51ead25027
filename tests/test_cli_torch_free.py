"""The command line answers without torch: ``ls``, ``--help``, ``--cfg job``, the config checks, and
``report`` / ``score`` on files import neither torch nor transformers (a fresh process each, with both
imports made to fail). How fast they answer is ``python -m ctxbench bench suite=cli``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKED = Path(__file__).with_name("torch_blocked.py")
REFEREE = Path(__file__).parent / "data" / "referee"
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin"}


def blocked(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BLOCKED), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**ENV, "PYTHONPATH": str(REPO)})


def test_importing_the_cli_imports_no_torch():
    code = "import sys, ctxbench.__main__; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**ENV, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("args, expect", [
    (("ls",), "method:"),
    (("eval", "--help"), "== Config groups (group=option) =="),
    (("train", "method=icae", "--help"), "mem_size"),
    (("eval", "--cfg", "job"), "qa_prompt:"),
    (("train", "method=icae", "--cfg", "job"), "mem_size"),
    (("data", "stats", "locomo_sample"), "sessions_without_date"),
    (("report", "table=mem0_locomo_table1"), "report: wrote"),
])
def test_answers_without_torch(args, expect, tmp_path):
    r = blocked(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout


def test_ls_lists_every_registered_name_without_importing_them():
    from ctxbench.core import registry

    r = blocked("ls")
    assert r.returncode == 0, r.stderr[-2000:]
    for kind in ("method", "memory", "judge", "format", "bench"):
        line = next(ln for ln in r.stdout.splitlines()[r.stdout.splitlines().index(f"{kind}:") + 1:]
                    if "registered:" in ln)
        assert line.split("registered: ")[1].split(", ") == registry.names(kind)


def test_config_errors_are_one_line_without_torch():
    r = blocked("eval", "trainer.lrr=0.1")
    assert r.returncode == 2 and "unknown config key 'trainer.lrr'" in r.stderr
    assert "torch_blocked" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = blocked("eval", "method=icea")
    assert r.returncode == 2 and "Did you mean 'icae'" in r.stderr


def test_score_and_report_on_files_without_torch(tmp_path):
    run = tmp_path / "scored"
    r = blocked("score", f"predictions={REFEREE / 'mem0_results.json'}", "format=mem0", "dataset=locomo",
                f"dataset.path={REFEREE / 'locomo_tiny.json'}", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((run / "results.json").read_text())["overall"]["n"] == 5
    r = blocked("report", f"compare={run},{run}", f"hydra.run.dir={tmp_path / 'rep'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "outputs" / "report").glob("compare_*.md"))


def test_the_blocker_blocks():
    """The guard itself: a command that builds a model does reach for torch, and fails here."""
    r = blocked("eval", "model=tiny", "memory=no_context", "dataset=locomo_sample", "limit=1", "llm=hf",
                "hydra.run.dir=/nonexistent-ctxbench-run")
    assert r.returncode != 0 and "torch_blocked" in r.stderr
