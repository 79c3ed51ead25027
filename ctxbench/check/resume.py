"""``resume`` and ``kill``: a run stopped midway and run again in the same folder gives the records of
a run never stopped — nothing lost, nothing answered twice, no memory built twice.

``resume`` stops in-process (an :class:`~ctxbench.check.doubles.Interrupted` raised inside an LLM call
halfway through the first history's construction, and again after half the answers); ``kill`` stops
a real process with ``kill -9`` at the same point (:mod:`ctxbench.check.kill_worker`), then reruns here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ctxbench.check.doubles import Interrupted
from ctxbench.check.harness import first_difference, run, untimed
from ctxbench.check.result import Fail, Skip


def stop_points(ctx: Any) -> list[tuple[str, Any]]:
    """Where to stop: halfway through the first history's construction calls (when it makes 2 or more),
    and after half the answers."""
    base = ctx.baseline().records
    points: list[tuple[str, Any]] = []
    built = int(((base[0].get("construction") or {}).get("calls")) or 0) if base else 0
    if ctx.target.kind == "memory" and built >= 2:
        points.append(("ingest", ("construction", built // 2 + 1)))
    if len(base) >= 2:
        points.append(("answers", max(1, len(base) // 2)))
    return points


def _what(point: tuple[str, Any]) -> str:
    kind, at = point
    return f"construction call {at[1]} of the first history" if kind == "ingest" else f"{at} answers"


def _stop_kw(point: tuple[str, Any]) -> dict[str, Any]:
    kind, at = point
    return {"stop_at": at} if kind == "ingest" else {"stop_after_answers": at}


def in_process(ctx: Any) -> str:
    points = stop_points(ctx)
    if getattr(ctx.target.obj, "borrows_backend", False):
        # its construction calls run in the lent server's threads, where an in-process stop cannot reach them
        # (the kill check stops such a run midway for real): it is stopped between answers only
        points = [p for p in points if p[0] == "answers"]
        if not points:
            raise Skip("a system that borrows the backend is stopped between answers only, and one question was asked "
                       "(the kill check stops its construction)")
    if not points:
        raise Skip("one question and no construction calls: nothing to stop midway")
    base = untimed(ctx.baseline().records)
    done = []
    for point in points:
        out = ctx.out / f"resume-{point[0]}"
        try:
            run(ctx.target, ctx.samples, out, limit=ctx.limit, **_stop_kw(point))
        except Interrupted:
            pass
        else:
            raise Skip(f"the run ended before {_what(point)} (the system calls less than the first run did)")
        before = _answered(out)
        rerun = run(ctx.target, ctx.samples, out, limit=ctx.limit)
        _compare(base, rerun, before, f"stopped at {_what(point)}")
        done.append(_what(point))
    return f"stopped at {' and at '.join(done)}, rerun in the same folder: the records of an uninterrupted run"


def _answered(out: Path) -> set[str]:
    path = out / "predictions.jsonl"
    if not path.is_file():
        return set()
    return {json.loads(x)["id"] for x in path.read_text(encoding="utf-8").splitlines()
            if x.strip() and not json.loads(x).get("failed")}


def _compare(base: list[dict[str, Any]], rerun: Any, before: set[str], how: str) -> None:
    twice = sorted({qid for qid, _ in rerun.predictions} & before)
    if twice:
        raise Fail(f"{how}: the rerun answered {len(twice)} question(s) again that were already answered ({twice[0]})")
    diff = first_difference(base, untimed(rerun.records))
    if diff:
        raise Fail(f"{how}, the rerun's records differ from an uninterrupted run's: {diff}")


def kill9(ctx: Any) -> str:
    """The same with a real ``kill -9`` of a process (the worker), then the rerun here."""
    if not ctx.kill:
        raise Skip("kill=false")
    points = stop_points(ctx)
    if not points:
        raise Skip("one question and no construction calls: nothing to kill midway")
    point = points[0]
    out = ctx.out / "kill"
    out.mkdir(parents=True, exist_ok=True)
    spec = worker_spec(ctx, out, point)
    if spec is None:
        raise Skip(f"{ctx.target.obj.__module__}.{ctx.target.obj.__qualname__} cannot be imported by another "
                   "process (defined in __main__ or a function)")
    path = out / "kill_spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "ctxbench.check.kill_worker", str(path)], capture_output=True,
                          text=True, timeout=ctx.timeout_s, env=env)
    if proc.returncode == 0:
        raise Skip(f"the process ended before {_what(point)}")
    if proc.returncode != -9:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Fail(f"the process to be killed failed first (exit {proc.returncode}): {tail}")
    before = _answered(out)
    rerun = run(ctx.target, ctx.samples, out, limit=ctx.limit)
    _compare(untimed(ctx.baseline().records), rerun, before, f"killed (-9) at {_what(point)}")
    return f"a process killed (-9) at {_what(point)}, rerun: the records of an uninterrupted run"


def worker_spec(ctx: Any, out: Path, point: tuple[str, Any]) -> dict[str, Any] | None:
    """What :mod:`ctxbench.check.kill_worker` needs to rebuild the run in another process (None: the class
    cannot be found there)."""
    import inspect

    from omegaconf import OmegaConf

    from ctxbench.check.samples_io import samples_to_json

    t = ctx.target
    cls = t.obj
    if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        return None
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:
        file = None
    return {"kind": t.kind, "name": t.name, "module": cls.__module__, "qualname": cls.__qualname__, "file": file,
            "cfg": OmegaConf.to_container(t.cfg, resolve=True),
            "model": OmegaConf.to_container(t.model_cfg, resolve=True) if t.model_cfg is not None else None,
            "qa_prompt": t.qa_prompt, "samples": samples_to_json(ctx.samples), "limit": ctx.limit,
            "out": str(out), "point": [point[0], list(point[1]) if isinstance(point[1], tuple) else point[1]]}
