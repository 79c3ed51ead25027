"""The sweep's run-folder faults (issue 37): a run folder or ``out=`` folder that is not what it seems.

- symbolic links inside a run folder (the lock, a results file pointing outside it): refused before
  anything is opened, the file outside untouched;
- results files with no run record beside them (someone else's predictions): refused, and adopted with
  ``force_resume=true`` (the control);
- ``export out=`` a folder that merely holds an ``export.json``, or a path below a file: refused, nothing
  replaced or created.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from bad_input.cases import EVAL_RERUN, EXPORT, TRAIN_RESUME, Case, Make, copy_fixture

GROUP = "faults"
OUTSIDE = "outside.txt"  # {work}/outside.txt: the file a link points to; it must stay as it was
PRECIOUS = "precious\n"
FOREIGN = '{"id": "conv-26_q0", "prediction": "someone else\'s answer"}\n'


def linked(fixture: str, rel: str) -> Make:
    """The fixture run copied to {work}/run with ``rel`` (a path below it) a link to {work}/outside.txt."""
    def make(work: Path, ctx: dict) -> None:
        copy_fixture(fixture)(work, ctx)
        (work / OUTSIDE).write_text(PRECIOUS)
        link = work / "run" / rel
        link.unlink(missing_ok=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(work / OUTSIDE)
    return make


def foreign(*names: str) -> Make:
    """{work}/run holding only ``names`` (someone else's results), no run record."""
    def make(work: Path, ctx: dict) -> None:
        (work / "run").mkdir()
        for name in names:
            (work / "run" / name).write_text(FOREIGN)
    return make


def export_into(edit: Callable[[Path], None]) -> Make:
    """The one-checkpoint train run copied to {work}/run, then ``edit(work)`` prepares the out= path."""
    def make(work: Path, ctx: dict) -> None:
        copy_fixture("train_one")(work, ctx)
        edit(work)
    return make


def stray_export_json(work: Path) -> None:
    (work / "export").mkdir()
    (work / "export" / "export.json").write_text("{}")
    (work / "export" / "thesis.tex").write_text("years of work")


def a_file(work: Path) -> None:
    (work / "afile").write_text("x")


def cases() -> list[Case]:
    ev, one = "eval_run", "train_one"
    link = ("symbolic link",)
    return [
        Case("faults.lock_symlink", GROUP, "runfolder lock is a symlink (to a file outside); eval rerun",
             EVAL_RERUN, linked(ev, ".ctxbench/lock"), needs=(ev,), expect=link),
        Case("faults.predictions_link_outside", GROUP, "predictions.jsonl is a link outside the run folder; eval rerun",
             EVAL_RERUN, linked(ev, "predictions.jsonl"), needs=(ev,), expect=link),
        Case("faults.results_link_outside", GROUP, "results.json is a link outside the run folder; eval rerun",
             EVAL_RERUN, linked(ev, "results.json"), needs=(ev,), expect=link),
        Case("faults.metrics_link_outside", GROUP, "metrics.jsonl is a link outside the run folder; train resume",
             TRAIN_RESUME, linked(one, "metrics.jsonl"), needs=(one,), expect=link),
        Case("faults.foreign_predictions", GROUP, "foreign predictions.jsonl without run.json; eval",
             EVAL_RERUN, foreign("predictions.jsonl"), expect=("no run record",)),
        Case("faults.foreign_results_and_samples", GROUP, "foreign results.json and samples.jsonl without run.json; eval",
             EVAL_RERUN, foreign("results.json", "samples.jsonl"), expect=("no run record",)),
        Case("faults.export_stray_export_json", GROUP, "export out= folder with a stray export.json (and other files)",
             EXPORT, export_into(stray_export_json), needs=(one,), expect=("{work}/export",)),
        Case("faults.export_out_below_file", GROUP, "export out=<file>/sub",
             EXPORT[:2] + ["out={work}/afile/sub"], export_into(a_file), needs=(one,), expect=("{work}/afile",)),
        Case("faults.control_foreign_adopted", GROUP,
             "foreign predictions.jsonl without run.json, adopted with force_resume=true (control)",
             EVAL_RERUN + ["force_resume=true"], foreign("predictions.jsonl"), control=True),
    ]
