"""``suite=eval_throughput``: how fast the one evaluator drives its backend, as ratios measured in one run.

Every check composes the real ``eval`` config, builds its systems with
:func:`ctxbench.evaluation.evaluator.build_history_systems` and answers through the evaluator's own loop
(:func:`ctxbench.evaluation.evaluator.run_system`), into fresh folders in the bench run folder:

- ``concurrency``: questions/s answered one at a time vs ``concurrency = slots`` workers, against
  the loopback OpenAI-compatible server (:mod:`.loopback_server`) answering each call after a fixed
  ``delay_s`` with ``slots`` parallel slots. Goal: a speed-up of at least 0.8 × slots.
- ``hf_batch``: questions/s on the packaged SmolLM2 (``llm=hf``) answered one by one vs with
  ``llm.batch_size`` workers whose calls the evaluator generates as batches
  (:class:`ctxbench.llm.shared.CallBatcher`; rows leave a batch as they stop: :mod:`ctxbench.llm.decode`),
  for each of ``batch_sizes`` (4, 8, 16), interleaved with the one-by-one runs ``repeats`` times (the
  model loaded once). Goal: at least 3× at the largest batch size (issue 41, on 2 CPU cores).
- ``prefix_reuse``: full_context answer latency on one LoCoMo-format conversation with
  ``llm.prefix_cache`` on vs off (the shared history's KV computed once: :mod:`ctxbench.llm.prefix_cache`).
  Goal: at most 0.2× the latency without reuse.
- ``call_cache``: the same questions twice with one fresh LLM call cache: cold vs every call a hit.

Each row says what was compared, both sides' seconds and questions/s, the ratio (speed-up, or
latency ratio for ``prefix_reuse``), the goal and whether it was met. Answers of both sides are
compared: a row whose sides answered differently says so (``same_answers``).
"""
from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ctxbench.core.registry import register
from ctxbench.config.compose import section_config
from ctxbench.bench.common import Skip, compose, rnd

CHECKS = ("concurrency", "hf_batch", "prefix_reuse", "call_cache")


def _answer(cfg: Any, out: Path, concurrency: int = 1, samples: list | None = None, limit: int | None = None
            ) -> tuple[float, list[dict[str, Any]], Any]:
    """(seconds, records, llm): one evaluator run of ``cfg`` into ``out`` (systems built first, not timed)."""
    from ctxbench.evaluation.evaluator import build_history_systems, run_system
    from ctxbench.core.registry import build

    data = samples if samples is not None else list(build("dataset", cfg.dataset))
    systems, llm, _ = build_history_systems(cfg, out)
    t0 = time.perf_counter()
    records = run_system(systems, data, out, llm=llm, limit=limit, progress=False, concurrency=concurrency)
    return time.perf_counter() - t0, records, llm


def _row(check: str, setting: str, base: tuple[float, list], new: tuple[float, list], goal: str, met: bool,
         ratio: float | None, **extra: Any) -> dict[str, Any]:
    (t0, r0), (t1, r1) = base, new
    same = [r["raw_prediction"] for r in r0] == [r["raw_prediction"] for r in r1]
    return {"check": check, "setting": setting, "questions": len(r1),
            "base_s": rnd(t0), "new_s": rnd(t1), "base_qps": rnd(len(r0) / t0) if t0 else None,
            "new_qps": rnd(len(r1) / t1) if t1 else None, "ratio": rnd(ratio) if ratio is not None else None,
            "goal": goal, "met": met, "same_answers": same, **extra}


def check_concurrency(cfg: Any, base: Path) -> dict[str, Any]:
    from ctxbench.bench.loopback_server import serve

    delay, slots = float(cfg.delay_s), cfg.slots
    memory, n = cfg.memory, cfg.questions
    from ctxbench.models.loading import smollm2_dir

    with serve(delay_s=delay, slots=slots) as server:  # counted with SmolLM2's tokenizer (no estimate)
        ecfg = compose("eval", [f"llm.tokenizer={smollm2_dir()}", f"dataset={cfg.dataset}", f"memory={memory}", "llm=openai",
                                "llm.model=loopback", f"llm.base_url={server.base_url}", "llm.api_key_env=null",
                                "llm.cache=false", f"llm.concurrency={slots}", "progress=false"])
        seq = _answer(ecfg, base / "concurrency_1", 1, limit=n)[:2]
        par = _answer(ecfg, base / f"concurrency_{slots}", slots, limit=n)[:2]
        peak = server.peak_in_flight
    ratio = seq[0] / par[0] if par[0] else None
    return _row("concurrency", f"memory={memory}, llm=openai loopback server: {delay:g} s per call, {slots} slots; "
                f"1 vs {slots} workers", seq, par, f">= {0.8 * slots:g}x (0.8 x slots)",
                ratio is not None and ratio >= 0.8 * slots, ratio, peak_in_flight=peak)


@contextlib.contextmanager
def _one_load() -> Any:
    """Every ``load_model`` of the same model config inside this block returns the first one's bundle
    (each side of ``hf_batch`` builds its own ``llm=hf`` backend: the weights load once)."""
    import json

    from omegaconf import OmegaConf

    import ctxbench.models.loading as loading

    real, memo = loading.load_model, {}

    def load(cfg: Any, device: Any = None) -> Any:
        key = (json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True, default=str), str(device))
        if key not in memo:
            memo[key] = real(cfg, device)
        return memo[key]
    loading.load_model = load
    try:
        yield
    finally:
        loading.load_model = real


def check_hf_batch(cfg: Any, base: Path) -> list[dict[str, Any]]:
    """One row per ``batch_sizes`` entry: the same questions one by one vs that many workers batched,
    measured interleaved (one by one, each batch size, again) ``repeats`` times; the ratio is the median
    of the per-repeat ratios, the seconds the medians. The goal applies to the largest batch size."""
    sizes, memory, n, reps = sorted({int(b) for b in cfg.batch_sizes}), cfg.memory, cfg.questions, int(cfg.repeats)
    top = sizes[-1]

    def ecfg(bs: int) -> Any:
        return compose("eval", [f"dataset={cfg.dataset}", f"memory={memory}", "llm=hf",
                                f"llm.model={cfg.llm_model}", "llm.cache=false",
                                f"llm.batch_size={bs}", f"llm.context_window={int(cfg.context_window)}",
                                "progress=false"])
    cfgs = {bs: ecfg(bs) for bs in sizes}
    with _one_load():
        _answer(cfgs[top], base / "hf_warmup_1", 1, limit=top)  # load the model, warm both paths alike, untimed
        _answer(cfgs[top], base / f"hf_warmup_{top}", top, limit=top)
        runs: dict[int, list[tuple[float, list, Any]]] = {1: [], **{bs: [] for bs in sizes}}
        for r in range(reps):
            runs[1].append(_answer(cfgs[top], base / f"hf_one_by_one_{r}", 1, limit=n))
            for bs in sizes:
                runs[bs].append(_answer(cfgs[bs], base / f"hf_batch_{bs}_{r}", bs, limit=n))
    one = runs[1]
    rows = []
    for bs in sizes:
        ratios = [o[0] / b[0] for o, b in zip(one, runs[bs]) if b[0]]
        ratio = statistics.median(ratios) if ratios else None
        batched = runs[bs]
        mean = [len(x[2].batch_sizes) and sum(x[2].batch_sizes) / len(x[2].batch_sizes) for x in batched][-1]
        goal, met = (">= 3x", ratio is not None and ratio >= 3.0) if bs == top else ("(reported)", None)
        row = _row("hf_batch", f"memory={memory}, llm=hf {cfg.llm_model}: one by one vs {bs} workers, calls "
                   f"generated in batches (mean batch {mean:.1f}); median of {reps} interleaved repeats",
                   (statistics.median(o[0] for o in one), one[0][1]),
                   (statistics.median(b[0] for b in batched), batched[0][1]), goal, met, ratio,
                   ratios=[rnd(x) for x in ratios])
        row["same_answers"] = all([x["raw_prediction"] for x in b[1]] == [x["raw_prediction"] for x in one[0][1]]
                                  for b in batched + one)
        rows.append(row)
    return rows


def check_prefix_reuse(cfg: Any, base: Path) -> dict[str, Any]:
    from ctxbench.bench.prefix_reuse import locomo_path, measure_full_context_prefix

    try:
        locomo_path()
    except FileNotFoundError as e:  # a conversation of real length is needed (the shipped sample is short)
        raise Skip(str(e)) from None
    m = measure_full_context_prefix(questions=cfg.questions,
                                    context_window=cfg.context_window,
                                    max_new_tokens=cfg.max_new_tokens)
    ratio = m.get("ratio")
    return {"check": "prefix_reuse", "setting": f"memory=full_context, llm=hf, one LoCoMo conversation "
            f"(~{round(m.get('prompt_tokens_mean') or 0)} prompt tokens): answer latency with vs without prefix reuse",
            "questions": m.get("questions"), "base_s": m.get("latency_off_s"), "new_s": m.get("latency_on_s"),
            "ratio": rnd(ratio) if ratio is not None else None, "goal": "<= 0.2x latency",
            "met": ratio is not None and ratio <= 0.2, "same_answers": m.get("replies_equal"),
            "prefix_hits": m.get("prefix_hits")}


def check_call_cache(cfg: Any, base: Path) -> dict[str, Any]:
    cache = base / "llm_cache.sqlite"
    for p in (cache, cache.with_name(cache.name + "-wal"), cache.with_name(cache.name + "-shm")):
        p.unlink(missing_ok=True)
    memory, n = cfg.memory, cfg.questions
    ecfg = compose("eval", [f"dataset={cfg.dataset}", f"memory={memory}", "llm=hf",
                            f"llm.model={cfg.llm_model}", "llm.cache=true",
                            f"llm.cache_path={cache}", f"llm.context_window={int(cfg.context_window)}",
                            f"++memory.max_new_tokens={int(cfg.max_new_tokens)}", "progress=false"])
    cold = _answer(ecfg, base / "cache_cold", 1, limit=n)
    warm = _answer(ecfg, base / "cache_warm", 1, limit=n)
    hits = warm[2].meter.total("answer").cached
    ratio = cold[0] / warm[0] if warm[0] else None
    return _row("call_cache", f"memory={memory}, llm=hf: cold vs the same calls from the call cache "
                f"({hits} hits)", cold[:2], warm[:2], "every call a hit", hits >= len(warm[1]), ratio)


@register("bench", "eval_throughput")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    checks = [str(c) for c in (cfg.checks or CHECKS)]
    for c in checks:
        if c not in CHECKS:
            raise ValueError(f"eval_throughput.checks: unknown check {c!r} (one of {', '.join(CHECKS)})")
    base = Path(ctx.get("run_dir") or tempfile.mkdtemp()) / "eval_throughput"
    rows = []
    for c in checks:
        try:
            got = globals()[f"check_{c}"](cfg[c] or section_config("bench", "eval_throughput")[c], base)
            rows.extend(got if isinstance(got, list) else [got])
        except Skip as e:
            rows.append({"check": c, "status": "skipped", "reason": str(e)})
    return {"description": "The evaluator's throughput: concurrency against a server with parallel slots, batched "
                           "local generation, shared-prefix reuse, the call cache; ratios from one run.",
            "params": {c: dict(cfg[c] or {}) for c in checks},
            "columns": [["check", "check"], ["setting", "compared"], ["questions", "questions"],
                        ["base_s", "before s"], ["new_s", "after s"], ["base_qps", "before q/s"],
                        ["new_qps", "after q/s"], ["ratio", "ratio"], ["goal", "goal"], ["met", "met"],
                        ["same_answers", "same answers"]],
            "rows": rows,
            "notes": ["ratio: before seconds / after seconds (a speed-up), except prefix_reuse: latency with reuse "
                      "/ latency without (lower is better).",
                      "seconds: the evaluator's loop (ingest + answer, appending predictions.jsonl), systems and "
                      "models built before the clock starts."]}
