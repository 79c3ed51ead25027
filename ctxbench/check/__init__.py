"""``python -m ctxbench check memory=NAME | method=NAME | dataset=NAME | metric=NAME``: conformance for plug-in authors.

The checks every built-in passes, run on one class — a built-in, an installed plug-in (entry point),
unpublished code (``plugins=``) or a class handed over in Python — on the scripted chat model
(:mod:`ctxbench.check.doubles`) and a shipped sample (``dataset=locomo_sample`` by default), through the
one evaluator. One module per family of checks:

- ``contract`` (:mod:`.contract`): derives from System, builds as ``eval`` builds it, ``answer`` returns a
  Prediction with a Usage;
- ``eval`` (:mod:`.end_to_end`): the whole eval path, the three result files, health ok;
- ``resume`` / ``kill`` (:mod:`.resume`): stopped midway (in-process; a real ``kill -9`` of a process,
  :mod:`.kill_worker`) and rerun: the records of an uninterrupted run;
- ``concurrency`` (:mod:`.concurrency`): records at concurrency 4 equal those at 1;
- ``protocol_pure`` (:mod:`.gold`): no gold field reaches the system;
- ``usage`` (:mod:`.usage`): the tokens recorded are those the backend counted;
- ``estimate`` (:mod:`.estimate`): ``estimate=true`` against the run, where the class declares ``estimate_calls``.

:mod:`.runner` runs them and :mod:`.result` prints the table; :func:`check` is the same from Python and
:mod:`ctxbench.check.pytest_plugin` from an author's tests.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from ctxbench.check.result import FAIL, CheckFailed, CheckResult, summary, table

__all__ = ["check", "main", "CheckResult", "CheckFailed", "table"]


def check(kind: str, name: Any, *, settings: dict[str, Any] | None = None, dataset: str | Any = "locomo_sample",
          checks: list[str] | None = None, out: str | Path | None = None, limit: int | None = None,
          concurrency: int = 4, kill: bool = True, qa_prompt: str | None = None, cfg: Any = None,
          model: Any = None, estimate_tolerance: float = 0.10, timeout_s: float = 300.0,
          echo: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """The checks of ``kind`` (memory | method | dataset | metric) for ``name`` (a registered name or the class),
    ``settings`` over its config; ``dataset``: the data systems run on (a conf/dataset name or a config);
    ``out``: the folder the runs are written to (a temporary one when None)."""
    from ctxbench.check.runner import Context, run_checks
    from ctxbench.check.target import resolve

    from ctxbench.check.runner import checks_for
    from ctxbench.core.errors import ConfigError

    unknown = [c for c in checks or [] if c not in checks_for(kind) and c not in checks_for("memory")]
    if unknown:
        raise ConfigError(f"checks={unknown[0]!r}: one of {', '.join(checks_for('memory'))}")
    target = resolve(kind, name, cfg, overrides=settings, model=model, qa_prompt=qa_prompt)
    if kind == "dataset":
        def load() -> list[Any]:
            return list(target.obj(target.cfg))
    else:
        data_cfg = _dataset_config(dataset)

        def load() -> list[Any]:
            from ctxbench.core.registry import build

            return list(build("dataset", data_cfg))
    if out is None:
        with tempfile.TemporaryDirectory(prefix="ctxbench-check-") as tmp:
            return _run(Context, run_checks, target, load, Path(tmp), limit, concurrency, kill, estimate_tolerance,
                        timeout_s, checks, echo)
    return _run(Context, run_checks, target, load, Path(out), limit, concurrency, kill, estimate_tolerance, timeout_s,
                checks, echo)


def _run(Context: Any, run_checks: Any, target: Any, load: Any, out: Path, limit: Any, concurrency: int, kill: bool,
         tolerance: float, timeout_s: float, checks: Any, echo: Any) -> list[CheckResult]:
    out.mkdir(parents=True, exist_ok=True)
    try:
        samples = load()
    except Exception as e:  # noqa: BLE001 - a dataset plug-in that cannot load is its contract failure
        if target.kind != "dataset":
            raise
        return [CheckResult("contract", FAIL, f"loading it raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")]
    ctx = Context(target, samples, out, limit=limit, concurrency=int(concurrency), kill=bool(kill),
                  estimate_tolerance=float(tolerance), timeout_s=float(timeout_s), load_samples=load)
    return run_checks(ctx, checks, echo)


def _dataset_config(dataset: Any) -> Any:
    if isinstance(dataset, str):
        from ctxbench.config.compose import option_config

        return option_config("dataset", {"name": dataset})
    return dataset


CHOSEN = ("memory", "method", "metric", "dataset")


def chosen(cfg: Any, given: list[str]) -> tuple[str, Any]:
    """(kind, name) of what ``check`` was asked to check: ``memory=`` or ``method=`` (then ``dataset=`` is the
    data it runs on), else ``metric=``, else ``dataset=``."""
    from ctxbench.core.errors import ConfigError

    keys = {a.partition("=")[0].lstrip("+~") for a in given}
    if "memory" in cfg and cfg.memory is not None and "memory" in keys:
        return "memory", str(cfg.memory.name)
    if "method" in cfg and cfg.method is not None and "method" in keys:
        return "method", str(cfg.method.name)
    if cfg.metric:
        return "metric", str(cfg.metric)
    if "dataset" in keys:
        return "dataset", str(cfg.dataset.name)
    raise ConfigError("check: name what to check: memory=NAME, method=NAME, dataset=NAME or metric=NAME")


def main(cfg: Any) -> list[CheckResult]:
    """``python -m ctxbench check ...``: the table of checks, check.json in the run folder; exit 2 on a failure."""
    from hydra.core.hydra_config import HydraConfig

    from ctxbench.runs.results import run_dir, write_json

    given = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    kind, name = chosen(cfg, given)
    out = run_dir(cfg)
    node = cfg[kind] if kind in ("memory", "method") else (cfg.dataset if kind == "dataset" else None)
    label = f"{kind}={name}"
    where = f" on dataset={cfg.dataset.name}" if kind in ("memory", "method") else ""
    print(f"check {label}{where} (scripted chat model{', model=' + str(cfg.model.name) if kind == 'method' else ''})"
          f" → {out}", flush=True)
    results = check(kind, name, cfg=node, dataset=cfg.dataset, checks=list(cfg.checks) if cfg.checks else None,
                    out=out, limit=cfg.limit, concurrency=cfg.concurrency, kill=cfg.kill, qa_prompt=cfg.qa_prompt,
                    model=cfg.model if kind == "method" else None, estimate_tolerance=cfg.estimate_tolerance,
                    timeout_s=cfg.timeout_s, echo=_echo)
    write_json(Path(out) / "check.json", {"target": label, "results": [r.to_dict() for r in results]})
    line = summary(label, results)
    if any(r.status == FAIL for r in results):
        raise CheckFailed(line)
    print(line)
    return results


def _echo(r: CheckResult) -> None:
    print(f"  {r.check:<13}  {r.status:<4}  {r.seconds:6.1f}s  {r.reason}", flush=True)
    sys.stdout.flush()
