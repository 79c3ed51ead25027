"""``python -m ctxbench bench [suite=all|NAME] [<suite>.<knob>=...]`` → bench.json + bench.md.

``suite=gpu`` (gpu.py: bf16 training steps on the 7B shapes) runs only when named, never under ``all``.

Each suite is a module here registered with ``@register("bench", NAME)`` as ``run(cfg, ctx) ->
dict`` (``rows``, ``columns`` for the markdown table, ``params``, ``notes``). The suites build their
subjects from what is registered at run time; a method or system that is missing or cannot run is a
row with ``status: skipped`` and the reason, and a suite that fails is recorded (``status: error``)
without stopping the others. bench.json and bench.md are rewritten after every suite, so an
interrupted run keeps what it measured. Ratios are always taken inside one run (the machine is
shared and noisy) and timings are medians over repeats.
"""
from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ctxbench.config.compose import section_config

SUITES = ("train_step", "kv_memory", "kv_press", "memory_systems", "retrieval", "eval_throughput", "structured", "cli")
EXTRA_SUITES = ("gpu",)  # run when named only (suite=gpu): 7B models need a GPU, `all` is sized for CPUs


def run_dir(cfg: Any) -> Path:
    from ctxbench.runs.results import run_dir as results_run_dir

    return results_run_dir(cfg, "outputs/bench/run")


def selected(cfg: Any) -> list[str]:
    from ctxbench.core.registry import UnknownName, suggest

    raw = cfg.suite
    names = list(raw) if not isinstance(raw, str) else [s.strip() for s in str(raw).split(",") if s.strip()]
    if names == ["all"]:
        return list(SUITES)
    for n in names:
        if n not in SUITES + EXTRA_SUITES:
            raise UnknownName(f"unknown bench suite {n!r}.{suggest(n, list(SUITES + EXTRA_SUITES) + ['all'])}")
    return names


def main(cfg: Any) -> dict[str, Any]:
    """Run the selected suites; write bench.json and bench.md into the run folder."""
    from ctxbench.core.registry import get
    from ctxbench.runs.results import plain_config, write_json
    from ctxbench.core.secrets import redact, redact_override
    from ctxbench.bench.common import machine_info
    from ctxbench.bench.report import markdown

    suites = selected(cfg)
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "command": ("python -m ctxbench bench " + " ".join(redact_override(a) for a in sys.argv[1:])).strip(),
        "machine": machine_info(), "config": redact(plain_config(cfg)), "suites": {}}
    for name in suites:
        print(f"bench: {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            res = get("bench", name)(cfg[name] or section_config("bench", name), {"run_dir": out, "cfg": cfg})
            res.setdefault("status", "ok")
        except Exception as e:  # noqa: BLE001 - a failed suite is recorded, the others still run
            from ctxbench.bench.common import Skip

            if isinstance(e, Skip):
                res = {"status": "skipped", "reason": str(e)}
            else:
                res = {"status": "error", "reason": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc(limit=8)}
        res["seconds"] = round(time.perf_counter() - t0, 2)
        doc["suites"][name] = res
        doc["machine"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(out / "bench.json", doc)
        from ctxbench.runs.results import atomic_write_text

        atomic_write_text(out / "bench.md", markdown(doc))
        print(f"bench: {name} {res['status']} in {res['seconds']:.1f}s"
              + (f" ({res.get('reason')})" if res["status"] != "ok" else ""), flush=True)
    print(f"bench: wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return doc
