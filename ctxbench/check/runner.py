"""Run the checks of a target, in order, each timed and turned into a :class:`CheckResult`.

The first ``eval`` run (concurrency 1, never stopped) is made once and shared: ``resume``, ``kill``,
``concurrency``, ``usage`` and ``estimate`` compare with it. A failed ``contract`` skips the rest.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ctxbench.check import concurrency, contract, end_to_end, estimate, gold, resume, usage
from ctxbench.check.harness import ContractBroken, Run, finish, run
from ctxbench.check.result import FAIL, PASS, SKIP, CheckResult, Fail, Skip
from ctxbench.check.target import Target

SYSTEM_CHECKS: dict[str, Callable[[Any], str]] = {
    "contract": contract.system,
    "eval": end_to_end.system,
    "resume": resume.in_process,
    "kill": resume.kill9,
    "concurrency": concurrency.check,
    "protocol_pure": gold.check,
    "usage": usage.check,
    "estimate": estimate.check,
}
DATASET_CHECKS: dict[str, Callable[[Any], str]] = {"contract": contract.dataset, "eval": end_to_end.dataset}
METRIC_CHECKS: dict[str, Callable[[Any], str]] = {"contract": contract.metric, "eval": end_to_end.metric}
ALL = tuple(SYSTEM_CHECKS)


def checks_for(kind: str) -> dict[str, Callable[[Any], str]]:
    return {"memory": SYSTEM_CHECKS, "method": SYSTEM_CHECKS, "dataset": DATASET_CHECKS, "metric": METRIC_CHECKS}[kind]


@dataclass
class Context:
    """What every check of one target reads: the target, the samples, the folder, the settings."""

    target: Target
    samples: list[Any]
    out: Path
    limit: int | None = None
    concurrency: int = 4
    delay: float = 0.002
    kill: bool = True
    estimate_tolerance: float = 0.10
    timeout_s: float = 300.0
    load_samples: Callable[[], list[Any]] = list
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def n_questions(self) -> int:
        n = sum(len(s.questions) for s in self.samples)
        return min(n, self.limit) if self.limit else n

    def baseline(self) -> Run:
        """The ``eval`` run every comparison is made with (made once)."""
        if "baseline" not in self.cache:
            try:
                self.cache["baseline"] = run(self.target, self.samples, self.out / "eval", limit=self.limit)
            except ContractBroken as e:
                raise Fail(str(e)) from None
            except Exception as e:  # noqa: BLE001
                raise Fail(f"eval raised {type(e).__name__}: {_line(e)}") from None
        return self.cache["baseline"]

    def results(self) -> dict[str, Any]:
        if "results" not in self.cache:
            self.cache["results"] = finish(self.baseline(), self.target)
        return self.cache["results"]


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


def run_checks(ctx: Context, names: list[str] | tuple[str, ...] | None = None,
               echo: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Every check of ``ctx.target``'s kind (those in ``names``), in order."""
    table = checks_for(ctx.target.kind)
    wanted = [n for n in table if names is None or n in names]
    results: list[CheckResult] = []
    broken = False
    for name in wanted:
        t0 = time.perf_counter()
        if broken and name != "contract":
            result = CheckResult(name, SKIP, "the contract check failed")
        else:
            try:
                result = CheckResult(name, PASS, table[name](ctx))
            except Skip as e:
                result = CheckResult(name, SKIP, str(e))
            except (Fail, ContractBroken) as e:
                result = CheckResult(name, FAIL, str(e))
            except Exception as e:  # noqa: BLE001 - a check that crashed on the system is a failure, said in one line
                result = CheckResult(name, FAIL, f"{type(e).__name__}: {_line(e)}")
        result.seconds = time.perf_counter() - t0
        broken = broken or (name == "contract" and result.status == FAIL)
        results.append(result)
        if echo is not None:
            echo(result)
    return results
