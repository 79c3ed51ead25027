"""Answer latency of ``eval memory=full_context`` with and without ``llm.prefix_cache`` (issue 21).

Every question of one LoCoMo conversation is asked with a prompt that starts with the same rendered
history; :mod:`ctxbench.llm.prefix_cache` computes that history once and reuses its KV cache. This
measures what that saves on the packaged SmolLM2: the real ``eval`` config (``dataset=locomo`` on
``../shared/data/locomo10.json`` or ``data/downloads/locomo10.json``, ``memory=full_context``,
``llm=hf``, no call cache) is composed, the system built once and the dataset's first conversation
ingested; its first ``questions`` questions are answered with reuse off, then again with it on (one
model: the backend's prefix cache is detached for the off run). Each run's first call is a warm-up
(the on run's first call is also the one that fills the prefix cache); the mean latency of
questions 2..n is reported. Not a bench suite of its own: ``bench suite=eval_throughput`` may call
:func:`measure_full_context_prefix`.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ..paths import source_root


def locomo_path() -> Path:
    """The official locomo10.json: the shared data folder beside the repo, else data/downloads/."""
    root = source_root() or Path.cwd()
    for p in (root.parent / "shared" / "data" / "locomo10.json", root / "data" / "downloads" / "locomo10.json"):
        if p.is_file():
            return p.resolve()
    raise FileNotFoundError("locomo10.json not found in ../shared/data/ or data/downloads/ "
                            "(python -m ctxbench data download locomo)")


def measure_full_context_prefix(questions: int = 6, context_window: int = 2048, max_new_tokens: int = 8,
                                path: str | Path | None = None) -> dict[str, Any]:
    """{latency_off_s, latency_on_s, ratio (on/off), prompt_tokens_mean, prefix_hits, ...} of the
    first ``questions`` (>= 2) full_context answers of LoCoMo's first conversation on SmolLM2."""
    from ..evaluate import build_system
    from ..registry import build
    from .common import compose

    if questions < 2:
        raise ValueError(f"questions must be >= 2 (the first is a warm-up), got {questions}")
    data = Path(path).resolve() if path else locomo_path()
    ecfg = compose("eval", ["dataset=locomo", f"dataset.path={data}", "memory=full_context", "llm=hf",
                            "llm.model=smollm2_135m", "llm.cache=false", "llm.prefix_cache=true",
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

    def run(cache: Any) -> tuple[list[float], list[str], list[int]]:
        llm.prefix_cache = cache
        times, texts, tokens = [], [], []
        for q in qs:
            m0 = llm.meter.get("answer").prompt_tokens
            t = time.perf_counter()
            pred = system.answer(q)
            times.append(time.perf_counter() - t)
            texts.append(pred.text)
            tokens.append(llm.meter.get("answer").prompt_tokens - m0)
        return times, texts, tokens

    try:
        off_t, off_text, off_tokens = run(None)
        reuse.clear()
        hits0, reused0 = reuse.hits, reuse.tokens_reused
        on_t, on_text, on_tokens = run(reuse)
    finally:
        llm.prefix_cache = reuse
    off, on = sum(off_t[1:]) / (len(qs) - 1), sum(on_t[1:]) / (len(qs) - 1)
    hits = reuse.hits - hits0
    return {"latency_off_s": round(off, 4), "latency_on_s": round(on, 4), "ratio": round(on / off, 4),
            "prompt_tokens_mean": round(sum(on_tokens) / len(on_tokens), 1), "prefix_hits": hits,
            "tokens_reused_mean": round((reuse.tokens_reused - reused0) / hits, 1) if hits else 0.0,
            "questions": len(qs), "replies_equal": on_text == off_text, "prompt_tokens_equal": on_tokens == off_tokens,
            "conversation": sample.history.id, "context_window": int(context_window),
            "max_new_tokens": int(max_new_tokens), "model": llm.model_name}
