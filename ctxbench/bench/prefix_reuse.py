"""Answer latency of ``eval memory=full_context`` with and without ``llm.prefix_cache`` (issue 21).

Every question of one LoCoMo conversation is asked with a prompt that starts with the same rendered
history; :mod:`ctxbench.llm.prefix_cache` computes that history once and reuses its KV cache. This
measures what that saves on the packaged SmolLM2: the real ``eval`` config (``dataset=locomo`` on
``../shared/data/locomo10.json`` or ``data/downloads/locomo10.json``, ``memory=full_context``,
``llm=hf``, no call cache) is composed, the system built once and the dataset's first conversation
ingested; each of its first ``questions`` questions is answered with reuse off, then with it on (one
model: the backend's prefix cache is detached for the off calls; off and on alternate so that load
from other processes weighs on both alike). The first question is a warm-up on both sides (on the
reuse side it is also the call that fills the prefix cache); the mean latency of questions 2..n is
reported, with every question's latency, whether it hit, and its prompt length. Not a bench suite of its own: ``bench suite=eval_throughput`` may call
:func:`measure_full_context_prefix`.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ctxbench.core.paths import source_root


def locomo_path() -> Path:
    """The official locomo10.json: the shared data folder beside the repo, else data/downloads/."""
    root = source_root() or Path.cwd()
    for p in (root.parent / "shared" / "data" / "locomo10.json", root / "data" / "downloads" / "locomo10.json"):
        if p.is_file():
            return p.resolve()
    raise FileNotFoundError("locomo10.json not found in ../shared/data/ or data/downloads/ "
                            "(python -m ctxbench data download locomo)")


def measure_full_context_prefix(questions: int = 6, context_window: int = 2048, max_new_tokens: int = 8,
                                path: str | Path | None = None, model: str = "smollm2_135m",
                                threads: int | None = None) -> dict[str, Any]:
    """{latency_off_s, latency_on_s, ratio (on/off), prompt_tokens_mean, prefix_hits, ...} of the
    first ``questions`` (>= 2) full_context answers of LoCoMo's first conversation on SmolLM2.

    ``path``: another LoCoMo-format file (default: :func:`locomo_path`); ``model``: another
    ``llm.model`` (tests use ``tiny``); ``threads``: torch's CPU threads while measuring (restored
    after; None = as they are). On a CPU shared with other processes, 1 thread gives steady times:
    with 2 threads on 2 busy cores the same call was measured anywhere between 0.5 and 10 s."""
    from ctxbench.evaluation.evaluator import build_system
    from ctxbench.core.registry import build
    from ctxbench.bench.common import compose

    if questions < 2:
        raise ValueError(f"questions must be >= 2 (the first is a warm-up), got {questions}")
    data = Path(path).resolve() if path else locomo_path()
    ecfg = compose("eval", ["dataset=locomo", f"dataset.path={data}", "memory=full_context", "llm=hf",
                            f"llm.model={model}", "llm.cache=false", "llm.prefix_cache=true",
                            f"llm.context_window={int(context_window)}", "progress=false",
                            f"++memory.max_new_tokens={int(max_new_tokens)}"])
    sample = list(build("dataset", ecfg.dataset))[0]
    qs = sample.questions[:questions]
    with tempfile.TemporaryDirectory() as tmp:
        system, llm, _ = build_system(ecfg, Path(tmp))
    llm = getattr(llm, "inner", llm)  # the HFChatLLM under a call cache, if one were configured
    reuse = llm.prefix_cache
    assert reuse is not None, "llm.prefix_cache=true but the backend built no prefix cache"
    system.ingest(sample.history)

    def ask(q: Any, cache: Any) -> tuple[float, str, int]:
        llm.prefix_cache = cache
        m0 = llm.meter.get("answer").prompt_tokens
        t = time.perf_counter()
        pred = system.answer(q)
        return time.perf_counter() - t, pred.text, llm.meter.get("answer").prompt_tokens - m0

    import torch

    threads_before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    reuse.clear()
    hits0, reused0 = reuse.hits, reuse.tokens_reused
    off_runs, on_runs, hit_flags = [], [], []
    try:
        for q in qs:  # off and on alternate, so load from other processes weighs on both alike
            off_runs.append(ask(q, None))
            h = reuse.hits
            on_runs.append(ask(q, reuse))
            hit_flags.append(reuse.hits > h)
    finally:
        llm.prefix_cache = reuse
        torch.set_num_threads(threads_before)
    off_t, on_t = [r[0] for r in off_runs], [r[0] for r in on_runs]
    off, on = sum(off_t[1:]) / (len(qs) - 1), sum(on_t[1:]) / (len(qs) - 1)
    hits = reuse.hits - hits0
    on_tokens = [r[2] for r in on_runs]
    return {"latency_off_s": round(off, 4), "latency_on_s": round(on, 4), "ratio": round(on / off, 4),
            "prompt_tokens_mean": round(sum(on_tokens) / len(on_tokens), 1), "prefix_hits": hits,
            "tokens_reused_mean": round((reuse.tokens_reused - reused0) / hits, 1) if hits else 0.0,
            "questions": len(qs), "replies_equal": [r[1] for r in on_runs] == [r[1] for r in off_runs],
            "prompt_tokens_equal": on_tokens == [r[2] for r in off_runs],
            "latencies_off_s": [round(t, 3) for t in off_t], "latencies_on_s": [round(t, 3) for t in on_t],
            "hit": hit_flags, "prompt_tokens": on_tokens,
            "conversation": sample.history.id, "context_window": int(context_window),
            "max_new_tokens": int(max_new_tokens), "model": llm.model_name, "threads": int(threads or threads_before)}
