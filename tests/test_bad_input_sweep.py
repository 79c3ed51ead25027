"""The bad-input sweep: every case of tests/bad_input/cases.py run as ``python -m ctxbench ...`` (in-process
through the CLI runner; a subprocess where its peak RSS is bounded) and classified by tests/bad_input/harness.py.

``test_bad_input_case[<case id>]`` asserts each case's outcome: a malformed input is refused in one clear
``ctxbench: error:`` line naming its file or key (or recovered from, where a recovery is documented), a
control succeeds, a malicious payload never runs. The full sweep is marked ``sweep`` (``make test-sweep``);
one fast case per group (each refused before any model loads) stays in the default suite. Also here: the
case list (counts per group, unique ids, every input builds) and the classifier.
"""
from __future__ import annotations

from collections import Counter

import pytest

from bad_input import cases as bic
from bad_input import faults_probe, faults_server, harness
from conftest import REPO

# exact, so a case added or lost is a deliberate change here too
COUNTS = {"locomo": 68, "pwc": 29, "dialsim": 50, "score": 33, "config_eval": 40, "config_train": 37,
          "server": 20, "runfiles": 46, "faults": 41}
# the default suite's share of the sweep: one case per group, each refused before any model loads
FAST = {"locomo.not_json", "pwc.empty_file", "dialsim.os_system", "score.not_json",
        "config_eval.dataset_path_nonexistent", "config_train.lr_neg", "server.http401",
        "runfiles.results_garbage_report", "faults.foreign_predictions"}
CASES = bic.all_cases()


def _param(case: bic.Case):
    limit = (case.timeout or harness.TIMEOUT) * 2 + (600 if case.needs else 60)  # fixture runs build on first need
    marks = [pytest.mark.timeout(limit)] + ([] if case.id in FAST else [pytest.mark.sweep])
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    s = harness.Sweep(tmp_path_factory.mktemp("bad-input-sweep"))
    yield s
    s.close()


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_case(sweep, case):
    rec = sweep.run(case)
    assert rec.outcome != "EXECUTED", rec.explain()
    assert rec.outcome in harness.expected(case), rec.explain()


# ---- the case list ----------------------------------------------------------------------------------

def test_case_counts_per_group():
    bad = Counter(c.group for c in CASES if not c.control)
    assert dict(bad) == COUNTS
    assert sum(bad[g] for g in bic.INPUT_GROUPS) >= 140 and bad["runfiles"] >= 20
    controls = Counter(c.group for c in CASES if c.control)
    assert set(controls) == set(COUNTS)  # each group has a valid input that must succeed


def test_case_ids_are_unique_and_prefixed():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert all(c.id.startswith(c.group + ".") and c.group in bic.GROUPS for c in CASES)
    assert all(c.server in {**bic.SERVER_MODES, **faults_probe.SERVER_MODES} or c.server in faults_server.MODES
               or c.server == "ok" for c in CASES)


def test_tiers():
    """One fast case per group in the default suite; the peak-RSS-bounded cases spawn (and only they)."""
    by_id = {c.id: c for c in CASES}
    assert FAST <= set(by_id) and {by_id[i].group for i in FAST} == set(bic.GROUPS)
    assert not any(by_id[i].control or harness.must_spawn(by_id[i]) for i in FAST)
    spawned = [c for c in CASES if harness.must_spawn(c)]
    assert all(c.mem_bound_mb for c in spawned) and len(spawned) == sum(bool(c.mem_bound_mb) for c in CASES) == 41


def test_every_input_builds(shared_data, tmp_path):
    ctx = {"shared": str(shared_data.parent), "repo": str(REPO), "fixtures": str(tmp_path / "fixtures")}
    for c in CASES:
        if c.needs or c.make is None:
            continue
        work = tmp_path / c.id
        work.mkdir()
        try:
            c.make(work, dict(ctx, work=work))
        except pytest.skip.Exception:  # a case that cannot hold here (a permission, as root)
            continue
        assert any(work.iterdir()), c.id
        for f in work.rglob("*"):
            f.unlink() if f.is_file() else None
    evil = {c.id: c for c in CASES if c.malicious}
    assert {"dialsim.os_system", "dialsim.subprocess_popen", "dialsim.builtins_eval", "dialsim.builtins_getattr",
            "dialsim.posix_system"} <= set(evil)
    assert len(bic.bytearray_of(2 ** 50)) < 40


def test_a_case_needing_absent_shared_data_skips(tmp_path):
    """Without ../shared/data a case built from it (or run on the base LoCoMo file) skips, naming the file."""
    s = harness.Sweep(tmp_path / "sweep", shared=tmp_path / "no-shared")
    try:
        by_id = {c.id: c for c in CASES}
        for cid, name in (("locomo.control", "locomo10.json"), ("pwc.missing_input", "pwc_dev_icae_v2.jsonl"),
                          ("config_eval.limit_neg", "locomo10.json"), ("runfiles.results_list_report", "locomo10.json")):
            with pytest.raises(pytest.skip.Exception, match=name):
                s.run(by_id[cid])
        assert not (tmp_path / "sweep" / "cases" / "locomo.control").exists()  # the case folder is removed
    finally:
        s.close()


# ---- the classifier ---------------------------------------------------------------------------------

def _case(**kw):
    return bic.Case("x.y", "score", "d", [], **kw)


def _res(rc=2, err="", out="", timed_out=False, peak=100, spawned=True):
    return {"rc": rc, "stderr": err, "stdout": out, "timed_out": timed_out, "seconds": 1.0, "peak_rss_mb": peak,
            "spawned": spawned}


def test_classifier(tmp_path):
    classify = harness.classify
    f = str(tmp_path / "pred.jsonl")
    c = _case(expect=(f,))
    assert classify(c, _res(err=f"warn\nctxbench: error: {f}: not UTF-8\n"), tmp_path, [f])[0] == "clear"
    assert classify(c, _res(err="ctxbench: error: something broke"), tmp_path, [f])[0] == "vague"
    assert classify(c, _res(rc=1, err="Traceback (most recent call last):\nValueError: x"), tmp_path,
                    [f])[0] == "traceback"
    assert classify(c, _res(rc=1, err="Error merging override"), tmp_path, [f])[0] == "unclear"
    assert classify(c, _res(rc=0), tmp_path, [f])[0] == "accepted"
    assert classify(c, _res(rc=-9), tmp_path, [f])[0] == "crash"
    assert classify(c, _res(timed_out=True, rc=-9), tmp_path, [f])[0] == "timeout"
    assert classify(c, _res(timed_out=True, rc=1, spawned=False), tmp_path, [f])[0] == "timeout"
    torn = _case(ok_if_success=True, recovery=r"torn last line")
    assert classify(torn, _res(rc=0, out="dropped a torn last line"), tmp_path, [])[0] == "recovered"
    assert classify(torn, _res(rc=0, out="done"), tmp_path, [])[0] == "accepted"
    named = _case(ok_if_success=True, recovery=r"(?i)torn")  # the case folder's name is no recovery
    assert classify(named, _res(rc=0, out=f"done → {tmp_path}/x.torn_last"), tmp_path / "x.torn_last",
                    [])[0] == "accepted"
    big = _case(mem_bound_mb=2048)
    assert classify(big, _res(err=f"ctxbench: error: {f}: x", peak=9000), tmp_path, [f])[0] == "accepted"
    assert classify(big, _res(err=f"ctxbench: error: {f}: x", peak=900), tmp_path, [f])[0] == "clear"
    assert classify(_case(control=True), _res(rc=0), tmp_path, [])[0] == "ok"
    assert classify(_case(control=True), _res(rc=2), tmp_path, [])[0] == "control_failed"
    assert classify(_case(must_recover=True, expect=(f,)), _res(err=f"ctxbench: error: {f}: x"), tmp_path,
                    [f])[0] == "not_recovered"
    (tmp_path / bic.MARKER).touch()
    assert classify(_case(malicious=True), _res(), tmp_path, [])[0] == "EXECUTED"
    assert harness.expected(_case(control=True)) == ("ok",)
    assert harness.expected(_case(ok_if_success=True, must_recover=True)) == ("recovered",)
    assert harness.expected(_case(ok_if_success=True)) == ("clear", "recovered")
    assert harness.expected(_case()) == ("clear",)
