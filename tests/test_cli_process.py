"""The CLI as a real process: the rest of the suite calls ``ctxbench.__main__.main`` in-process (the
``cli`` fixture); these spawn ``python -m ctxbench`` as a user does, so the entry point, its exit codes
and its output streams are checked in a fresh interpreter too."""
from __future__ import annotations

import pytest

from conftest import run_cli
from ctxbench.__main__ import COMMANDS


def test_a_process_fails_in_one_line_with_exit_2():
    r = run_cli("train", "trainer.lrr=0.1", spawn=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("ctxbench: error: unknown config key 'trainer.lrr'")


@pytest.mark.process
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_composes_as_a_process(command):
    r = run_cli(command, "--cfg", "job", spawn=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() and "Traceback" not in r.stderr
