"""scripts/bad_input_sweep.py: its cases (counts per group, unique ids, every input builds), its classifier,
and one real case run end to end as the sweep runs it."""
from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# exact, so a case added or lost is a deliberate change here too
COUNTS = {"locomo": 68, "pwc": 29, "dialsim": 50, "score": 33, "config_eval": 40, "config_train": 37,
          "server": 20, "runfiles": 46}


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("bad_input_sweep", REPO / "scripts" / "bad_input_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bad_input_sweep"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cases(sweep):
    return sweep.bic.all_cases()


def test_case_counts_per_group(sweep, cases):
    bad = Counter(c.group for c in cases if not c.control)
    assert dict(bad) == COUNTS
    assert sum(bad[g] for g in sweep.bic.INPUT_GROUPS) >= 140 and bad["runfiles"] >= 20
    controls = Counter(c.group for c in cases if c.control)
    assert set(controls) == set(COUNTS)  # each group has a valid input that must succeed


def test_case_ids_are_unique_and_prefixed(sweep, cases):
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))
    assert all(c.id.startswith(c.group + ".") and c.group in sweep.bic.GROUPS for c in cases)
    assert all(c.server in sweep.bic.SERVER_MODES or c.server == "ok" for c in cases)


def test_every_input_builds(sweep, cases, shared_data, tmp_path):
    ctx = {"shared": str(shared_data.parent), "repo": str(REPO), "fixtures": str(tmp_path / "fixtures")}
    for c in cases:
        if c.needs or c.make is None:
            continue
        work = tmp_path / c.id
        work.mkdir()
        c.make(work, dict(ctx, work=work))
        assert any(work.iterdir()), c.id
        for f in work.rglob("*"):
            f.unlink() if f.is_file() else None
    evil = {c.id: c for c in cases if c.malicious}
    assert {"dialsim.os_system", "dialsim.subprocess_popen", "dialsim.builtins_eval", "dialsim.builtins_getattr",
            "dialsim.posix_system"} <= set(evil)
    assert len(sweep.bic.bytearray_of(2 ** 50)) < 40


def _case(sweep, **kw):
    return sweep.bic.Case("x.y", "score", "d", [], **kw)


def _res(rc=2, err="", out="", timed_out=False, peak=100):
    return {"rc": rc, "stderr": err, "stdout": out, "timed_out": timed_out, "seconds": 1.0, "peak_rss_mb": peak}


def test_classifier(sweep, tmp_path):
    f = str(tmp_path / "pred.jsonl")
    c = _case(sweep, expect=(f,))
    assert sweep.classify(c, _res(err=f"warn\nctxbench: error: {f}: not UTF-8\n"), tmp_path, [f])[0] == "clear"
    assert sweep.classify(c, _res(err="ctxbench: error: something broke"), tmp_path, [f])[0] == "vague"
    assert sweep.classify(c, _res(rc=1, err="Traceback (most recent call last):\nValueError: x"), tmp_path,
                          [f])[0] == "traceback"
    assert sweep.classify(c, _res(rc=1, err="Error merging override"), tmp_path, [f])[0] == "unclear"
    assert sweep.classify(c, _res(rc=0), tmp_path, [f])[0] == "accepted"
    assert sweep.classify(c, _res(rc=-9), tmp_path, [f])[0] == "crash"
    assert sweep.classify(c, _res(timed_out=True, rc=-9), tmp_path, [f])[0] == "timeout"
    torn = _case(sweep, ok_if_success=True, recovery=r"torn last line")
    assert sweep.classify(torn, _res(rc=0, out="dropped a torn last line"), tmp_path, [])[0] == "recovered"
    assert sweep.classify(torn, _res(rc=0, out="done"), tmp_path, [])[0] == "accepted"
    named = _case(sweep, ok_if_success=True, recovery=r"(?i)torn")  # the case folder's name is no recovery
    assert sweep.classify(named, _res(rc=0, out=f"done → {tmp_path}/x.torn_last"), tmp_path / "x.torn_last",
                          [])[0] == "accepted"
    big = _case(sweep, mem_bound_mb=2048)
    assert sweep.classify(big, _res(err=f"ctxbench: error: {f}: x", peak=9000), tmp_path, [f])[0] == "accepted"
    (tmp_path / sweep.bic.MARKER).touch()
    assert sweep.classify(_case(sweep, malicious=True), _res(), tmp_path, [])[0] == "EXECUTED"


def test_one_case_end_to_end(sweep, cases, tmp_path):
    """score on a file that is not JSON, run as a real subprocess and classified as the sweep does."""
    [case] = [c for c in cases if c.id == "score.not_json"]
    args = argparse.Namespace(python=sys.executable, repo=str(REPO), timeout=300, keep=False)
    ctx = {"root": str(tmp_path), "fixtures": str(tmp_path / "fixtures"), "shared": str(REPO.parent / "shared"),
           "repo": str(REPO)}
    server = sweep.FakeServer()
    try:
        rec = sweep.run_case(case, ctx, args, server, {})
    finally:
        server.close()
    assert rec["outcome"] == "clear", rec
    assert rec["exit_code"] == 2 and rec["command"].startswith("python -m ctxbench score predictions=")
    assert rec["last_stderr_line"].startswith("ctxbench: error: ") and "pred.jsonl" in rec["last_stderr_line"]
    assert not (tmp_path / "cases" / case.id).exists()  # the case folder is removed afterwards
