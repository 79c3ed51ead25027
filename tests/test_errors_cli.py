"""Every error the project raises on purpose is a CtxbenchError, printed as one line; bugs keep their traceback.

The CLI catches :class:`ctxbench.core.errors.CtxbenchError` (plus FileNotFoundError and omegaconf's
MissingMandatoryValue) instead of a list of classes that new code forgot to extend. The walk below
imports every module of the package and fails on any exception class defined there that is neither
a CtxbenchError nor one of the internal control-flow exceptions listed (with their reason) in
:data:`INTERNAL`.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import ctxbench
from ctxbench.core.errors import ConfigError, CtxbenchError

# exceptions that never reach the user: each is caught inside the package and turned into something else
INTERNAL = {
    "ctxbench.evaluation.estimate.ModelCalled": "a bug in a system's estimate plan (a model asked during "
                                                "estimate=true): a traceback is what its author needs",
    "ctxbench.bench.common.Skip": "a suite that cannot run here; the reason is recorded in bench.json",
    "ctxbench.check.result.Fail": "a check's finding: the runner turns it into a 'fail' row of check's table",
    "ctxbench.check.result.Skip": "a check that does not apply: the runner turns it into a 'skip' row with the reason",
    "ctxbench.check.doubles.Interrupted": "check stops its own run midway (a BaseException, as KeyboardInterrupt); "
                                          "the resume check catches it",
    "ctxbench.data.safe_pickle.RefusedGlobal": "safe_loads turns it into a DataError naming the file",
    "ctxbench.data.safe_pickle.TooLarge": "safe_loads turns it into a DataError naming the file and the budget",
    "ctxbench.data.records.NonJsonConstant": "the JSON readers turn it into a DataError naming file, line, column",
    "ctxbench.llm.openai_compat._Retryable": "the retry loop retries it, then records a failed call",
    "ctxbench.llm.lend.wire.ApiError": "the lent server answers it as an OpenAI error reply to the borrower (HTTP "
                                       "status + error object); it never reaches the user's command line",
    "ctxbench.llm.openai_compat._Unreachable": "a _Retryable: retried, or LLMUnavailable before any reply",
    "ctxbench.llm.openai_compat._Fatal": "the call is recorded failed without retries",
    "ctxbench.llm.openai_compat._TooSlow": "a trickled reply body: retried like a timeout, then a failed call",
    "ctxbench.llm.openai_compat._Refused": "a _Fatal the server named invalid: a failed call at once, no backoff",
    "ctxbench.llm.refusal.CallFailed": "_send's outcome: the chat call records a failed call, the probe an outcome",
    "ctxbench.llm.normalize.NotJSON": "schema.load_json turns it into a SchemaError: an invalid structured output",
    "ctxbench.bench.loopback_server.HTTPError": "a scripted reply's way to answer with an HTTP error (loopback server)",
}


def project_exception_classes() -> dict[str, type[BaseException]]:
    """qualified name → class, for every exception class defined at module level in ctxbench."""
    found, failed = {}, []
    for info in pkgutil.walk_packages(ctxbench.__path__, "ctxbench."):
        try:
            mod = importlib.import_module(info.name)
        except Exception as e:  # a module that cannot be imported could hide an error class
            failed.append(f"{info.name}: {e!r}")
            continue
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    assert not failed, f"modules that do not import: {failed}"
    return found


CLASSES = project_exception_classes()


def test_every_project_error_is_a_ctxbench_error():
    stray = sorted(n for n, c in CLASSES.items() if not issubclass(c, CtxbenchError) and n not in INTERNAL)
    assert not stray, f"make these CtxbenchError subclasses (or list them in INTERNAL with a reason): {stray}"
    assert not set(INTERNAL) - set(CLASSES), "INTERNAL names a class that no longer exists"


def test_the_walk_sees_the_known_errors():
    for name in ("ctxbench.data.errors.DataError", "ctxbench.training.checkpoint.CheckpointError",
                 "ctxbench.memory.stores.records.StoreError", "ctxbench.core.registry.UnknownName",
                 "ctxbench.config.schema.ConfigTypeError", "ctxbench.export.ExportError"):
        assert issubclass(CLASSES[name], CtxbenchError), name
    assert issubclass(CLASSES["ctxbench.data.errors.DataError"], ValueError)  # old bases kept
    assert issubclass(CLASSES["ctxbench.training.checkpoint.CheckpointError"], RuntimeError)
    assert issubclass(ConfigError, ValueError)


def run_ls(monkeypatch, capsys, raise_: BaseException) -> tuple[int, str]:
    """``python -m ctxbench ls`` in-process, its work replaced by raising ``raise_``."""
    import ctxbench.report.listing
    from ctxbench.__main__ import main

    def broken(cfg):
        raise raise_

    monkeypatch.setattr(ctxbench.report.listing, "main", broken)
    monkeypatch.setattr(sys, "argv", ["ctxbench", "ls"])
    with pytest.raises(SystemExit) as e:
        main(["ls"])
    return e.value.code, capsys.readouterr().err


def instance(cls: type[BaseException], message: str) -> BaseException:
    """An instance of ``cls`` with ``message``, whatever its constructor takes (DataError wants a path)."""
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    return e


@pytest.mark.parametrize("name", sorted(n for n, c in CLASSES.items() if issubclass(c, CtxbenchError)))
def test_every_project_error_prints_one_line_exit_2(monkeypatch, capsys, name):
    code, err = run_ls(monkeypatch, capsys, instance(CLASSES[name], f"something the user can fix ({name})"))
    assert code == 2
    assert err.strip().splitlines() == [f"ctxbench: error: something the user can fix ({name})"]


def test_user_caused_library_errors_print_one_line(monkeypatch, capsys):
    code, err = run_ls(monkeypatch, capsys, FileNotFoundError(2, "No such file or directory", "/nope.json"))
    assert code == 2 and "/nope.json" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"), ValueError("an internal invariant broke"),
                                 KeyError("x"), TypeError("bad operand")])
def test_a_real_bug_keeps_its_traceback_exit_1(monkeypatch, capsys, bug):
    code, err = run_ls(monkeypatch, capsys, bug)
    assert code == 1
    assert "Traceback (most recent call last)" in err and type(bug).__name__ in err


def test_ctxbench_error_is_still_importable_from_main():
    from ctxbench.__main__ import CtxbenchError as FromMain

    assert FromMain is CtxbenchError
