"""``suite=eval_throughput``: questions/s of the evaluator with the local model, and the call cache.

The real ``eval`` config (``dataset``, ``memory``, ``llm=hf`` with a short ``max_new_tokens``) is
composed and its system built once (model load timed apart). The evaluator's own loop
(:func:`ctxbench.evaluate.run_system` + scoring) then answers the first ``questions`` questions
twice into two fresh folders, with one fresh LLM call cache in the bench run folder: the first run
is cold (every call generates), the second repeats the same calls and must hit the cache. Reported:
questions/s of both and the speed-up (cold seconds ÷ cached seconds), with the cache hits counted
by the backend's meter.
"""
from __future__ import annotations

import time
from typing import Any

from ..registry import register
from .common import compose, is_registered, rnd


@register("bench", "eval_throughput")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    from ..evaluate import build_system, finalize, run_system
    from ..metrics.base import build_metrics
    from ..registry import build
    from .common import Skip

    memory, llm_kind = str(cfg.get("memory", "full_context")), str(cfg.get("llm", "hf"))
    if not is_registered("memory", memory):
        raise Skip(f"memory={memory} is not registered")
    if not is_registered("llm", llm_kind):
        raise Skip(f"llm={llm_kind} is not registered")
    base = ctx["run_dir"] / "eval_throughput"
    cache_path = base / "llm_cache.sqlite"
    for p in (cache_path, cache_path.with_name(cache_path.name + "-wal"), cache_path.with_name(cache_path.name + "-shm")):
        p.unlink(missing_ok=True)
    n = int(cfg.get("questions", 6))
    overrides = [f"dataset={cfg.get('dataset', 'locomo_sample')}", f"memory={memory}", f"llm={llm_kind}",
                 f"llm.cache=true", f"llm.cache_path={cache_path}", f"limit={n}", "progress=false",
                 f"++memory.max_new_tokens={int(cfg.get('max_new_tokens', 8))}"]
    if llm_kind == "hf":
        overrides += [f"llm.model={cfg.get('llm_model', 'smollm2_135m')}",
                      f"llm.context_window={int(cfg.get('context_window', 1024))}"]
    ecfg = compose("eval", overrides)
    samples = list(build("dataset", ecfg.dataset))
    t0 = time.perf_counter()
    system, llm, name = build_system(ecfg, base / "cold")
    load_s = time.perf_counter() - t0
    metrics = build_metrics([str(m) for m in (cfg.get("metrics") or ["f1"])], llm=None)
    runs = []
    for label in ("cold", "cached"):
        out = base / label
        m0 = llm.meter.get("answer") if llm is not None else None
        before = (m0.calls, m0.cached) if m0 else (0, 0)
        t1 = time.perf_counter()
        records = run_system(system, samples, out, llm=llm, limit=n, progress=False)
        t_answer = time.perf_counter() - t1
        finalize(out, records, metrics, ecfg, "eval", with_cost=True, extra={"system": name}, progress=False)
        t_total = time.perf_counter() - t1
        m1 = llm.meter.get("answer") if llm is not None else None
        calls, hits = ((m1.calls - before[0], m1.cached - before[1]) if m1 else (0, 0))
        runs.append({"run": label, "questions": len(records), "seconds": rnd(t_total), "answer_seconds": rnd(t_answer),
                     "questions_per_s": rnd(len(records) / t_total) if t_total else None,
                     "llm_calls": calls, "cache_hits": hits})
    cold, warm = runs
    speedup = rnd(cold["seconds"] / warm["seconds"]) if warm["seconds"] else None
    for r in runs:
        r["speedup"] = 1.0 if r is cold else speedup
        r["system"] = name
    model = llm.model_name if llm is not None else "-"
    return {"description": f"Evaluator throughput: {name} on {ecfg.dataset.name}, llm={llm_kind} ({model}), "
                           f"first {n} questions, max_new_tokens={cfg.get('max_new_tokens', 8)}; "
                           f"model load {load_s:.1f}s (not counted).",
            "params": {"memory": memory, "llm": llm_kind, "model": model, "questions": n,
                       "context_window": ecfg.llm.get("context_window"), "load_s": rnd(load_s)},
            "columns": [["run", "run"], ["questions", "questions"], ["seconds", "seconds"],
                        ["questions_per_s", "questions/s"], ["llm_calls", "LLM calls"], ["cache_hits", "cache hits"],
                        ["speedup", "speed-up vs cold"]],
            "rows": runs, "speedup": speedup,
            "notes": ["seconds = the evaluator's loop (ingest + answer every question, appending predictions.jsonl) "
                      "+ scoring and writing results; the cached run reuses the call cache the cold run filled."]}
