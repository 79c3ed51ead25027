"""Every file a train or eval run folder holds, damaged: a one-line error naming it, or a safe recovery.

Files (read back by resume, report, export or score): a checkpoint's model.json, method.json,
state.json, trainable.safetensors, optimizer.pt, scheduler.pt and MANIFEST.json; train
metrics.jsonl and train_summary.json; eval predictions.jsonl and its per-rank shard files;
results.json (report); .ctxbench/run.json and the lock; the LLM call cache; a memory store.
Corruptions: truncated, zero bytes, garbage (not UTF-8), valid JSON of the wrong type, missing.
A corrupt *latest* checkpoint under ``trainer.resume=auto`` is skipped, saying so, and the run
resumes exactly from the newest intact one; a checkpoint named explicitly still fails.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.training import checkpoint as ck
from ctxbench.data.errors import DataError

GARBAGE = b"\xff\xfe\x00\x9c garbage \x80\x81 not a file the trainer wrote"
KINDS = ["truncated", "empty", "garbage", "missing"]


def damage(f: Path, kind: str) -> None:
    """Damage file ``f`` the ``kind`` way (a wrong-type JSON is written by the tests themselves)."""
    if kind == "truncated":
        data = f.read_bytes()
        f.write_bytes(data[: max(1, len(data) // 2)])
    elif kind == "empty":
        f.write_bytes(b"")
    elif kind == "garbage":
        f.write_bytes(GARBAGE)
    elif kind == "missing":
        f.unlink()
    else:  # pragma: no cover
        raise ValueError(kind)


def one_line(err: BaseException, *names: str) -> str:
    msg = str(err)
    assert "\n" not in msg, msg
    for name in names:
        assert name in msg, (name, msg)
    return msg


# ---- checkpoints -------------------------------------------------------------------------------------

def saved(root: Path, step: int = 2) -> tuple[Path, torch.optim.Optimizer, object, torch.nn.Module]:
    """A checkpoint as the trainer writes one: weights, configs, optimizer, scheduler, RNG states."""
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    c = ck.save_checkpoint(root, step, trainable={"weight": model.weight.detach().clone()},
                           method_config={"name": "lm", "seq_len": 32}, model_config={"name": "tiny"},
                           optimizer=opt, scheduler=sched,
                           state={"micro": 2 * step, "rng": {"0": ck.rng_state()}, "model": "tiny", "method": "lm"})
    return c, opt, sched, model


class Target(torch.nn.Module):
    """A built method to load weights into (``load_trainable`` as the methods do it)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, 2))

    def load_trainable(self, state):
        with torch.no_grad():
            for k, v in state.items():
                dict(self.named_parameters())[k].copy_(v)


def load_all(c: Path, opt, sched) -> None:
    """Everything resume and eval read from a checkpoint, in their order."""
    ck.saved_configs(c)
    state = ck.load_training_state(c, opt, sched)
    ck.load_trained(Target(), c)
    ck.restore_rng(c, state, 0)


def reseal(c: Path) -> None:
    """Rewrite the manifest after a change, as if the file had been written that way (a trainer bug)."""
    ck.write_manifest(c)


CKPT_FILES = ["model.json", "method.json", "state.json", "trainable.safetensors", "optimizer.pt", "scheduler.pt"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CKPT_FILES)
def test_a_damaged_checkpoint_file_is_caught_by_the_manifest(tmp_path, name, kind):
    c, opt, sched, _ = saved(tmp_path)
    damage(c / name, kind)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, str(c), name)


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage"])
@pytest.mark.parametrize("name", CKPT_FILES)
def test_a_damaged_checkpoint_file_behind_a_matching_manifest_names_the_file(tmp_path, name, kind):
    c, opt, sched, _ = saved(tmp_path)
    damage(c / name, kind)
    reseal(c)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, str(c), name)


STATE_WRONG = [
    ("[1, 2]", "a JSON list"),
    ('"step"', "a JSON string"),
    ('{"step": 2, "micro": 4}', "lacks rng"),
    ('{"step": "two", "micro": 4, "rng": {}}', 'field step is "two", expected an integer'),
    ('{"step": 2.5, "micro": 4, "rng": {}}', "field step is 2.5"),
    ('{"step": true, "micro": 4, "rng": {}}', "field step is true"),
    ('{"step": 2, "micro": -1, "rng": {}}', "field micro is -1"),
    ('{"step": 2, "micro": 4, "rng": [1]}', "field rng is a JSON list"),
    ('{"step": 9, "micro": 4, "rng": {}}', "field step is 9 but the folder is step_0000002"),
    ('{"step": 2, "micro": 4, "rng": {"0": "x"}}', "field rng.0 cannot be restored"),
    ('{"step": 2, "micro": 4, "rng": {"0": {"python": "(3, (1, 2), None)", "numpy": [], "torch": []}}}',
     "field rng.0 cannot be restored"),
    ('[' * 100000 + ']' * 100000, "nested too deeply"),
]


@pytest.mark.parametrize("text,says", STATE_WRONG, ids=[s for _, s in STATE_WRONG])
def test_state_json_of_the_wrong_type_names_the_field(tmp_path, text, says):
    c, opt, sched, _ = saved(tmp_path)
    (c / "state.json").write_text(text)
    reseal(c)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, "state.json", says)


@pytest.mark.parametrize("name", ["method.json", "model.json"])
@pytest.mark.parametrize("text", ["[1, 2]", '"lm"', '{"seq_len": 32}', "null"])
def test_a_config_file_of_the_wrong_type_names_the_file(tmp_path, name, text):
    c, opt, sched, _ = saved(tmp_path)
    (c / name).write_text(text)
    reseal(c)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, name)


MANIFEST_WRONG = ["[]", '"x"', '{"state.json": {"bytes": "12", "sha256": "ab"}}',
                  '{"state.json": {"bytes": 12}}', '{"../../etc/passwd": {"bytes": 1, "sha256": "ab"}}',
                  '{"/etc/passwd": {"bytes": 1, "sha256": "ab"}}']


@pytest.mark.parametrize("text", MANIFEST_WRONG)
def test_a_manifest_of_the_wrong_type_names_the_file(tmp_path, text):
    c, opt, sched, _ = saved(tmp_path)
    (c / ck.MANIFEST).write_text(text)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, ck.MANIFEST)


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage"])
def test_a_damaged_manifest_names_the_file(tmp_path, kind):
    c, opt, sched, _ = saved(tmp_path)
    damage(c / ck.MANIFEST, kind)
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, ck.MANIFEST)


def test_a_file_the_manifest_lists_replaced_by_a_folder_is_missing(tmp_path):
    c, opt, sched, _ = saved(tmp_path)
    (c / "scheduler.pt").unlink()
    (c / "scheduler.pt").mkdir()
    with pytest.raises(ck.CheckpointError) as e:
        load_all(c, opt, sched)
    one_line(e.value, "scheduler.pt is missing")


def test_a_stray_step_folder_is_not_a_checkpoint(tmp_path):
    saved(tmp_path, 2)
    (tmp_path / "step_final").mkdir()
    (tmp_path / "step_final" / ck.MANIFEST).write_text("{}")
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_0000002"]  # was: int("final") ValueError


# ---- the fallback: resume=auto skips a damaged newest ---------------------------------------------

def restore_from(opt, sched):
    def restore(c):
        state = ck.load_training_state(c, opt, sched)
        ck.load_trained(Target(), c)
        ck.restore_rng(c, state, 0)
        return state
    return restore


FALLBACK = ([(name, kind) for name in [*CKPT_FILES, ck.MANIFEST] for kind in KINDS]
            + [("state.json", "wrong type")])


@pytest.mark.parametrize("name,kind", FALLBACK, ids=[f"{n}-{k}" for n, k in FALLBACK])
def test_resume_newest_skips_a_damaged_latest_saying_so(tmp_path, name, kind):
    old, opt, sched, _ = saved(tmp_path, 2)
    new, _, _, _ = saved(tmp_path, 4)
    if kind == "wrong type":
        (new / name).write_text('{"step": "four", "micro": 8, "rng": {}}')
        reseal(new)  # the manifest matches: only reading the state finds it
    else:
        damage(new / name, kind)
    said = []
    ckpt, state = ck.resume_newest(tmp_path, restore_from(opt, sched), warn=said.append)
    assert ckpt == old and state["step"] == 2
    assert len(said) == 1
    one_line(said[0], "skipping a damaged checkpoint", "step_0000004", name, "resuming from step_0000002")


def test_resume_newest_with_every_checkpoint_damaged_names_the_newest(tmp_path):
    old, opt, sched, _ = saved(tmp_path, 2)
    new, _, _, _ = saved(tmp_path, 4)
    damage(new / "state.json", "garbage")
    damage(old / ck.WEIGHTS, "truncated")
    with pytest.raises(ck.CheckpointError, match="no usable checkpoint") as e:
        ck.resume_newest(tmp_path, restore_from(opt, sched), warn=lambda m: None)
    one_line(e.value, "step_0000004", "state.json")
    assert ck.resume_newest(tmp_path / "none", restore_from(opt, sched)) is None


TRAIN = ["train", "method=lm", "model=tiny", "trainer.progress=false", "method.seq_len=32", "method.lora.dropout=0.1",
         "trainer.max_steps=6", "trainer.save_every=2"]


def _losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """(an uninterrupted 6-step run, a run stopped after step 4 with checkpoints at 2 and 4)."""
    from conftest import run_cli

    root = tmp_path_factory.mktemp("fallback")
    full, cut = root / "full", root / "cut"
    for run, extra in ((full, []), (cut, ["trainer.stop_after=4"])):
        r = run_cli(*TRAIN, *extra, f"hydra.run.dir={run}")
        assert r.returncode == 0, r.stderr[-2000:]
    return full, cut


def _damaged_copy(cut: Path, to: Path, part: str = "state") -> Path:
    """A copy of the stopped run whose newest checkpoint is damaged: a wrongly typed state.json behind a
    matching manifest (``state``), or weights overwritten with zeros of the same size (``weights``)."""
    import shutil

    shutil.copytree(cut, to)
    latest = to / "checkpoints" / "step_0000004"
    if part == "weights":
        w = latest / ck.WEIGHTS
        w.write_bytes(b"\0" * w.stat().st_size)  # same size, other bytes: the manifest catches it
        return to
    (latest / "state.json").write_text('{"step": "four", "micro": 4, "rng": {}}')  # was: a bare ValueError
    reseal(latest)
    return to


@pytest.mark.parametrize("part,says", [("state", ("state.json", "field step")), ("weights", (ck.WEIGHTS,))])
def test_resume_auto_falls_back_to_the_intact_checkpoint_and_matches_an_uninterrupted_run(cli, interrupted, tmp_path,
                                                                                          part, says):
    from safetensors.torch import load_file

    full, cut = interrupted
    run = _damaged_copy(cut, tmp_path / "run", part)
    r = cli(*TRAIN, "trainer.resume=auto", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    said = [ln for ln in out.splitlines() if "skipping a damaged checkpoint" in ln]
    assert len(said) == 1
    one_line(said[0], "step_0000004", *says, "resuming from step_0000002")
    assert "step_0000002 at step 2" in out and "Traceback" not in out
    a, b = _losses(full), _losses(run)
    assert sorted(b) == list(range(1, 7))
    for step in range(1, 7):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step
    wa = load_file(str(full / "checkpoints" / "step_0000006" / ck.WEIGHTS))
    wb = load_file(str(run / "checkpoints" / "step_0000006" / ck.WEIGHTS))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_an_explicitly_named_damaged_checkpoint_still_fails(cli, interrupted, tmp_path):
    run = _damaged_copy(interrupted[1], tmp_path / "run")
    latest = run / "checkpoints" / "step_0000004"
    r = cli(*TRAIN, f"trainer.resume={latest}", f"hydra.run.dir={run}")
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxbench: error: checkpoint") and "state.json" in last and "field step" in last
    assert "Traceback" not in r.stderr and "resuming from" not in r.stdout + r.stderr


def test_a_saved_config_value_of_the_wrong_type_names_the_key(cli, interrupted, tmp_path):
    """model.json {"hidden_size": "abc"} behind a matching manifest: int('abc') was a bare traceback."""
    import shutil

    ckpt = tmp_path / "step_0000002"
    shutil.copytree(interrupted[1] / "checkpoints" / "step_0000002", ckpt)
    model = json.loads((ckpt / "model.json").read_text())
    (ckpt / "model.json").write_text(json.dumps({**model, "hidden_size": "abc"}))
    reseal(ckpt)
    r = cli("eval", "method=lm", f"checkpoint={ckpt}", "dataset=locomo_sample", "limit=1",
            f"hydra.run.dir={tmp_path / 'eval'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    one_line(r.stderr.strip().splitlines()[-1], "model.json", "config key 'model.hidden_size' must be int, got 'abc'")


def test_a_sweep_with_only_broken_runs_names_why(tmp_path, capsys):
    from ctxbench.report.runs import ReportError
    from ctxbench.report.sweep import sweep_report

    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "train_summary.json").write_text("{nope")
    with pytest.raises(ReportError) as e:
        sweep_report(tmp_path, plot=False)
    one_line(e.value, "no finished jobs", "skipped 1 broken", "train_summary.json", "malformed JSON")


# ---- train metrics.jsonl -----------------------------------------------------------------------------

def metrics_log(run: Path, data: bytes, resume_step: int = 3):
    from ctxbench.training.metrics_log import MetricsLog

    (run / "metrics.jsonl").write_bytes(data)
    cfg = OmegaConf.create({"logger": {"name": "none"}})
    return MetricsLog(run, cfg, enabled=True, resume_step=resume_step, say=lambda _m: None)


GOOD = b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'


@pytest.mark.parametrize("data,says", [
    (GOOD + GARBAGE + b"\n" + GOOD, "record line 3: malformed JSON (not UTF-8)"),
    (b'{"step": 1, "lo\n' + GOOD, "record line 1: malformed JSON"),
    (b"[1, 2]\n" + GOOD, "record line 1: expected a JSON object"),
    (b'{"step": "1", "loss": 2.0}\n' + GOOD, "record line 1: expected a JSON object with an integer step"),
    (b'{"step": 1, "loss": "low"}\n' + GOOD, "field 'loss'"),
    (b"[" * 100000 + b"]" * 100000 + b"\n" + GOOD, "nested too deeply"),
], ids=["garbage", "truncated line", "list", "step string", "loss string", "deep"])
def test_a_damaged_metrics_line_names_file_and_line(tmp_path, data, says):
    with pytest.raises(DataError) as e:
        metrics_log(tmp_path, data)
    one_line(e.value, "metrics.jsonl", says)


@pytest.mark.parametrize("data,kept", [(b"", []), (GOOD + b'{"step": 3, "lo', [1, 2]),
                                       (GOOD + GARBAGE, [1, 2])], ids=["empty", "torn last", "garbage last"])
def test_an_empty_or_torn_metrics_file_is_recovered(tmp_path, data, kept):
    metrics_log(tmp_path, data)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == kept


# ---- eval predictions.jsonl and shard files ----------------------------------------------------------

ROW = b'{"id": "q1", "prediction": "Paris", "answer": "Paris"}\n'


@pytest.mark.parametrize("name", ["predictions.jsonl", "predictions.rank1.jsonl"])
@pytest.mark.parametrize("data,says", [
    (GARBAGE + b"\n" + ROW, "record line 1: malformed JSON (not UTF-8)"),
    (b'{"id": "q0", "predic\n' + ROW, "record line 1: malformed JSON"),
    (b'"q0"\n' + ROW, "expected a JSON object, got a JSON string"),
    (b'{"prediction": "x"}\n' + ROW, "field 'id': missing required field"),
    (b'{"id": {"a": 1}, "prediction": "x"}\n' + ROW, "field 'id'"),
    (b'{"id": "q0", "prediction": 5}\n' + ROW, "field 'prediction'"),
    (b'{"id": "q0", "prediction": "x", "failed": "no"}\n' + ROW, "field 'failed'"),
], ids=["garbage", "truncated line", "string", "no id", "id object", "prediction number", "failed string"])
def test_a_damaged_predictions_line_names_file_and_line(tmp_path, name, data, says):
    from ctxbench.evaluation.evaluator import _answered

    (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError) as e:
        _answered(tmp_path)
    one_line(e.value, name, says)


@pytest.mark.parametrize("name", ["predictions.jsonl", "predictions.rank0.jsonl"])
@pytest.mark.parametrize("tail", [b"", b'{"id": "q2", "predi', GARBAGE], ids=["empty", "torn", "garbage"])
def test_a_torn_or_empty_predictions_file_is_recovered(tmp_path, name, tail):
    from ctxbench.evaluation.evaluator import _answered

    (tmp_path / name).write_bytes((ROW if tail else b"") + tail)
    done = _answered(tmp_path)
    assert list(done) == (["q1"] if tail else [])
    assert (tmp_path / name).read_bytes() == (ROW if tail else b"")  # the torn line is gone: re-answered


# ---- results.json, train_summary.json, metrics.jsonl as report reads them --------------------------

@pytest.mark.parametrize("name", ["results.json", "train_summary.json"])
@pytest.mark.parametrize("data,says", [
    (b'{"overall": {"f1": 0.', "malformed JSON"), (b"", "malformed JSON"), (GARBAGE, "not UTF-8"),
    (b"[1, 2]", "a JSON list, expected an object"), (b'"done"', "a JSON string, expected an object"),
    (b"[" * 100000, "nested too deeply"),
], ids=["truncated", "empty", "garbage", "list", "string", "deep"])
def test_report_names_a_damaged_run_file(tmp_path, name, data, says):
    from ctxbench.report.runs import ReportError, find_runs, load_run

    (tmp_path / name).write_bytes(data)
    with pytest.raises(ReportError) as e:
        load_run(tmp_path)
    one_line(e.value, name, says)
    assert find_runs([tmp_path]) == []  # one broken run folder is skipped with that line, not a traceback


@pytest.mark.parametrize("results,says", [
    ({"overall": [0.5]}, "field overall is a JSON list"),
    ({"overall": {"f1": "0.5"}}, 'field overall.f1 is "0.5", expected a number'),
    ({"overall": {"f1": 0.5, "f1_stderr": [1]}}, "field overall.f1_stderr"),
    ({"overall": {"f1": 0.5}, "by_category": [1]}, "field by_category is a JSON list"),
    ({"overall": {"f1": 0.5}, "by_category": {"temporal": 3}}, "field by_category.temporal is a JSON number"),
    ({"overall": {"f1": 0.5}, "by_category": {"temporal": {"f1": True}}}, "field by_category.temporal.f1"),
])
def test_report_names_a_results_field_of_the_wrong_type(tmp_path, results, says):
    from ctxbench.report.runs import ReportError, load_run

    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(ReportError) as e:
        load_run(tmp_path)
    one_line(e.value, "results.json", says)


def test_report_reads_good_results_and_skips_damaged_metrics_lines(tmp_path):
    from ctxbench.report.runs import load_run

    (tmp_path / "results.json").write_text(json.dumps(
        {"overall": {"n": 2, "f1": 0.5, "f1_stderr": None}, "by_category": {"temporal": {"id": 2, "f1": 0.5}}}))
    assert load_run(tmp_path).scalar_metrics() == {"n": 2, "f1": 0.5}
    train = tmp_path / "train"
    train.mkdir()
    (train / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 2.0}\n[1]\n' + GARBAGE
                                          + b'\n{"step": 2, "loss": 1.0}\n')
    assert load_run(train).train == {"final_loss": 1.0, "step": 2}


@pytest.mark.parametrize("name,text,says", [
    ("config.yaml", "- a\n- b\n", "expected a mapping"),
    ("overrides.yaml", "a: 1\n", "expected a list of overrides"),
])
def test_report_names_hydra_files_of_the_wrong_type(tmp_path, name, text, says):
    from ctxbench.report.runs import ReportError, load_run

    (tmp_path / "results.json").write_text('{"overall": {"f1": 0.5}}')
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / name).write_text(text)
    with pytest.raises(ReportError) as e:
        load_run(tmp_path)
    one_line(e.value, name, says)


# ---- .ctxbench/run.json and the lock -----------------------------------------------------------------

def guard_cfg(k=10):
    return OmegaConf.create({"memory": {"name": "rag", "k": k}, "seed": 0})


@pytest.mark.parametrize("data,says", [
    (b'{"fingerprint": "ab", "conf', "unreadable run record"), (b"", "unreadable run record"),
    (GARBAGE, "unreadable run record"), (b"[1, 2]", "not a JSON object"),
    (b'{"fingerprint": "ab", "config": [1]}', "no 'config' object"),
    (b'{"fingerprint": 5, "config": {}}', "'fingerprint' is not a string"),
    (b'{"fingerprint": "ab", "config": {}, "previous_fingerprints": 7}', "'previous_fingerprints' is not a list"),
    (b'{"fingerprint": "ab", "config": {}, "previous_fingerprints": "abc"}', "'previous_fingerprints' is not a list"),
    (b"[" * 100000, "nested too deeply"),
], ids=["truncated", "empty", "garbage", "list", "config list", "fingerprint int", "previous int", "previous str",
        "deep"])
def test_a_damaged_run_record_names_the_file(tmp_path, data, says):
    from ctxbench.runs.guard import RunFolderError, check_config

    (tmp_path / ".ctxbench").mkdir()
    (tmp_path / ".ctxbench" / "run.json").write_bytes(data)
    with pytest.raises(RunFolderError) as e:
        check_config(tmp_path, guard_cfg(), force=True)
    one_line(e.value, "run.json", says)


def test_a_run_record_is_recovered_by_deleting_it(tmp_path):
    from ctxbench.runs.guard import check_config

    check_config(tmp_path, guard_cfg())
    path = tmp_path / ".ctxbench" / "run.json"
    rec = json.loads(path.read_text())
    rec.pop("previous_fingerprints", None)
    path.write_text(json.dumps(rec))
    again = check_config(tmp_path, guard_cfg(k=3), force=True)  # an older record without the list
    assert again["previous_fingerprints"] == [rec["fingerprint"]]


@pytest.mark.parametrize("how", ["lock is a folder", "guard dir is a file"])
def test_an_unusable_lock_names_the_file(tmp_path, how):
    from ctxbench.runs.guard import RunFolderError, acquire_lock

    if how == "lock is a folder":
        (tmp_path / ".ctxbench" / "lock").mkdir(parents=True)
    else:
        (tmp_path / ".ctxbench").write_bytes(GARBAGE)
    with pytest.raises(RunFolderError) as e:
        acquire_lock(tmp_path)
    one_line(e.value, ".ctxbench", "cannot open the run folder's lock file")


def test_a_lock_file_with_garbage_in_it_is_just_taken(tmp_path):
    from ctxbench.runs.guard import acquire_lock, release_lock

    (tmp_path / ".ctxbench").mkdir()
    (tmp_path / ".ctxbench" / "lock").write_bytes(GARBAGE)
    acquire_lock(tmp_path)
    try:
        assert (tmp_path / ".ctxbench" / "lock").read_text().strip().isdigit()  # our pid
    finally:
        release_lock(tmp_path)


# ---- the LLM call cache --------------------------------------------------------------------------------

def damage_db(path: Path, kind: str, keep: int) -> None:
    """A SQLite file cut to its first ``keep`` bytes (the header survives, the pages do not), or garbage."""
    path.write_bytes(path.read_bytes()[:keep] if kind == "truncated" else GARBAGE * 100)


def fresh_cache(path: Path):
    from ctxbench.llm.base import ChatResult
    from ctxbench.llm.cache import CallCache

    c = CallCache(path)
    c.put("k", ChatResult(text="Paris", prompt_tokens=3, completion_tokens=1))
    return c


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_a_damaged_call_cache_names_the_file(tmp_path, kind):
    from ctxbench.llm.cache import CallCache

    path = tmp_path / "llm_cache.sqlite"
    c = fresh_cache(path)
    c._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c._conn().close()
    damage_db(path, kind, keep=1000)
    with pytest.raises(DataError) as e:
        CallCache(path).get("k")
    one_line(e.value, str(path), "llm.cache=false")


def test_an_empty_call_cache_is_a_fresh_one(tmp_path):
    from ctxbench.llm.cache import CallCache

    path = tmp_path / "llm_cache.sqlite"
    path.write_bytes(b"")
    assert CallCache(path).get("k") is None


@pytest.mark.parametrize("row", [(None, 3, 1), ("Paris", None, 1), ("Paris", "3", 1), ("Paris", 3, -1),
                                 (b"Paris", 3, 1), ("", 3, 1)])
def test_a_cache_row_of_the_wrong_type_is_a_miss(tmp_path, row):
    from ctxbench.llm.base import ChatResult

    path = tmp_path / "llm_cache.sqlite"
    c = fresh_cache(path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE calls")
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, text, prompt_tokens, completion_tokens, created REAL, "
                   "flags, model)")
        db.execute("INSERT INTO calls VALUES ('k', ?, ?, ?, 0, NULL, NULL)", row)
    assert c.get("k") is None  # asked again ...
    c.put("k", ChatResult(text="Paris", prompt_tokens=3, completion_tokens=1))
    got = c.get("k")
    assert (got.text, got.prompt_tokens, got.completion_tokens, got.truncated) == ("Paris", 3, 1, False)  # rewritten


def test_a_cache_file_from_before_the_flags_column_is_migrated(tmp_path):
    from ctxbench.llm.base import ChatResult
    from ctxbench.llm.cache import CallCache

    path = tmp_path / "llm_cache.sqlite"
    with sqlite3.connect(path) as db:  # the layout before truncated/constrained were stored
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, text TEXT NOT NULL, prompt_tokens INTEGER, "
                   "completion_tokens INTEGER, created REAL)")
        db.execute("INSERT INTO calls VALUES ('old', 'Paris', 3, 1, 0)")
    c = CallCache(path)
    old = c.get("old")
    assert old.text == "Paris" and not old.truncated  # an old row is still a hit
    c.put("new", ChatResult(text="x", prompt_tokens=1, completion_tokens=1, truncated=True))
    assert c.get("new").truncated


# ---- a memory store ------------------------------------------------------------------------------------

def fresh_store(path: Path):
    from ctxbench.memory.stores.records import RecordStore

    s = RecordStore(path)
    s.add("h", "fact", "Paris is in France", meta={"turn": 1})
    s.set_progress("h", 1)
    s.set_state("h", "summary", {"text": "x"})
    s.commit()
    s.close()


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_a_damaged_memory_store_names_the_file(tmp_path, kind):
    from ctxbench.memory.stores.records import RecordStore, StoreError

    path = tmp_path / "memory.sqlite"
    fresh_store(path)
    damage_db(path, kind, keep=2000)
    with pytest.raises(StoreError) as e:
        RecordStore(path).records("h")
    one_line(e.value, str(path), "damaged memory store")


def test_an_empty_memory_store_is_a_fresh_one(tmp_path):
    from ctxbench.memory.stores.records import RecordStore

    path = tmp_path / "memory.sqlite"
    path.write_bytes(b"")
    assert RecordStore(path).records("h") == []


@pytest.mark.parametrize("sql,read,says", [
    ("UPDATE records SET meta='{not json'", "records", "records.meta of record 1 is not JSON"),
    ("UPDATE records SET meta='[1]'", "records", "record 1 has a text or meta of the wrong type"),
    ("UPDATE records SET emb=x'0102'", "records", "records.emb of record 1"),
    ("UPDATE progress SET done='three'", "progress", "progress.done of history 'h'"),
    ("UPDATE state SET value='{x'", "state", "state 'summary' of history 'h' is not JSON"),
    ("UPDATE changes SET new='{x'", "changes", "changes.new is not JSON"),
], ids=["meta garbage", "meta list", "emb odd bytes", "progress text", "state garbage", "change garbage"])
def test_a_memory_store_cell_of_the_wrong_type_names_it(tmp_path, sql, read, says):
    from ctxbench.memory.stores.records import RecordStore, StoreError

    path = tmp_path / "memory.sqlite"
    fresh_store(path)
    with sqlite3.connect(path) as db:
        db.execute(sql)
    s = RecordStore(path)
    reads = {"records": lambda: s.records("h"), "progress": lambda: s.progress("h"),
             "state": lambda: s.get_state("h", "summary"), "changes": lambda: s.changes("h")}
    with pytest.raises(StoreError) as e:
        reads[read]()
    one_line(e.value, str(path), says)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "embedding"])
def test_a_damaged_graph_store_names_the_file(tmp_path, kind):
    pytest.importorskip("ladybug")
    import numpy as np

    from ctxbench.memory.stores.graph import LadybugGraph
    from ctxbench.memory.stores.records import StoreError

    path = tmp_path / "graph.lbdb"
    g = LadybugGraph(path)
    g.add_node("h", "Paris", np.ones(3), step=0)
    if kind == "embedding":
        g._run("MATCH (n:Entity) SET n.emb = '{not json'")
    g.close()
    if kind != "embedding":
        damage(path, kind)
    with pytest.raises(StoreError) as e:
        LadybugGraph(path).nodes("h")
    one_line(e.value, str(path))
