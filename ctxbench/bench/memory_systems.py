"""``suite=memory_systems``: what each memory system costs to build and to query.

Every system (built from ``conf/memory/<name>.yaml`` through the real ``eval`` config, with the real
MiniLM embedder) ingests each conversation of the dataset into a fresh store in the run folder and
answers its questions. Per system: ingest seconds and LLM calls per conversation, construction
tokens per conversation, query latency p50/p95 (retrieval + prompt + the answer call),
tokens per question (answer prompt + completion + construction amortised over the conversation's
questions, as the evaluator's cost does), memory items kept and the store's size on disk.

``llm: scripted`` (default) uses :class:`.scripted_llm.ScriptedChatModel`, whose replies cost no
time, so the numbers are the system's own overhead; ``llm: hf`` uses the packaged local model.
"""
from __future__ import annotations

import shutil
import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import compose, dir_bytes, is_registered, median, percentile, rnd


def make_llm(cfg: Any) -> tuple[Any, str]:
    kind = cfg.llm
    if kind == "scripted":
        from ctxbench.bench.scripted_llm import ScriptedChatModel, tokenizer_counter

        counter = tokenizer_counter(cfg.count_tokens_with)
        how = f"tokens counted with the {cfg.count_tokens_with} tokenizer" if counter else "tokens = words"
        return ScriptedChatModel(counter), f"scripted (zero-cost replies; {how})"
    from ctxbench.core.registry import build

    ecfg = compose("eval", [f"llm={kind}", *list(cfg.llm_overrides or [])])
    return build("llm", ecfg.llm), f"{kind}:{ecfg.llm.get('model', '')}"


def measure_system(name: str, samples: list[Any], llm: Any, embedder: Any, workdir: Any, cfg: Any) -> dict[str, Any]:
    from ctxbench.core.registry import build, get

    mem = compose("eval", [f"memory={name}"]).memory
    for key, value in (("progress", False), ("rebuild", True), ("max_sessions", cfg.max_sessions)):
        if key in mem:
            mem[key] = value
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    emb = embedder if get("memory", name).needs_embedder else None
    system = build("memory", mem, llm=llm, embedder=emb, workdir=workdir)
    n_q = cfg.questions
    ingest_s, calls, con_tokens, items, latencies, per_q_tokens = [], [], [], [], [], []
    for sample in samples:
        qs = sample.questions[: int(n_q)] if n_q else sample.questions
        c0 = llm.meter.get("construction")
        b = (c0.calls, c0.prompt_tokens + c0.completion_tokens)
        if hasattr(system, "reset"):
            system.reset()
        t0 = time.perf_counter()
        system.ingest(sample.history)
        ingest_s.append(time.perf_counter() - t0)
        c1 = llm.meter.get("construction")
        calls.append(c1.calls - b[0])
        built = c1.prompt_tokens + c1.completion_tokens - b[1]
        con_tokens.append(built)
        last = None
        for q in qs:
            t1 = time.perf_counter()
            pred = system.answer(q)
            latencies.append(time.perf_counter() - t1)
            u = pred.usage
            per_q_tokens.append(u.answer_prompt_tokens + u.answer_completion_tokens + built / max(1, len(qs)))
            last = u
        items.append(last.memory_items if last is not None else 0)
    if hasattr(system, "close"):
        system.close()
    n_conv = len(samples)
    return {"system": name, "status": "ok", "conversations": n_conv,
            "sessions": sum(len(s.history.sessions) for s in samples), "questions": len(latencies),
            "ingest_s_per_conv": rnd(sum(ingest_s) / n_conv), "ingest_s_median": rnd(median(ingest_s)),
            "llm_calls_per_conv": rnd(sum(calls) / n_conv, 2),
            "construction_tokens_per_conv": rnd(sum(con_tokens) / n_conv, 1),
            "query_p50_ms": rnd(1000 * percentile(latencies, 50), 2) if latencies else None,
            "query_p95_ms": rnd(1000 * percentile(latencies, 95), 2) if latencies else None,
            "tokens_per_question": rnd(sum(per_q_tokens) / len(per_q_tokens), 1) if per_q_tokens else None,
            "memory_items_per_conv": rnd(sum(items) / n_conv, 1), "store_kb": rnd(dir_bytes(workdir) / 1024, 1)}


@register("bench", "memory_systems")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    from tqdm.auto import tqdm

    from ctxbench.core.registry import build, get

    systems = [str(s) for s in cfg.systems]
    ecfg = compose("eval", [f"dataset={cfg.dataset}", f"embedder={cfg.embedder}"])
    samples = [s for s in build("dataset", ecfg.dataset) if s.questions]
    embedder = None
    rows: list[dict[str, Any]] = []
    llm, llm_desc = make_llm(cfg)  # one model for all systems; each system's share is a meter delta
    unknown: dict[str, int] = {}
    for name in tqdm(systems, desc="memory_systems", leave=False):
        if not is_registered("memory", name):
            rows.append({"system": name, "status": "skipped", "reason": "not registered (memory module missing)"})
            continue
        seen = dict(getattr(llm, "unknown", {}))
        if embedder is None and get("memory", name).needs_embedder:
            embedder = build("embedder", ecfg.embedder)
            embedder.encode(["warm-up"])  # model load is not charged to the first system
        cache = getattr(embedder, "_cache", None)
        if hasattr(cache, "clear"):  # every system pays for embedding its own texts (no hits from the last one)
            cache.clear()
        try:
            rows.append(measure_system(name, samples, llm, embedder, ctx["run_dir"] / "memory_systems" / name, cfg))
        except Exception as e:  # noqa: BLE001 - one broken system does not stop the suite
            rows.append({"system": name, "status": "error", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
        for k, v in getattr(llm, "unknown", {}).items():
            if v - seen.get(k, 0):
                unknown[f"{name}: {k}"] = v - seen.get(k, 0)
    notes = [f"LLM: {llm_desc}; embedder: {cfg.embedder}; dataset: {cfg.dataset} "
             f"({len(samples)} conversations).",
             "query latency = system.answer() wall time (retrieval + prompt + answer call); tokens/question = answer "
             "prompt + completion + construction tokens amortised over the conversation's questions.",
             "store KB = size on disk of the system's run folder (SQLite records, graph) after all conversations."]
    if unknown:
        notes.append(f"prompts the scripted model did not recognise (generic reply): {unknown}")
    return {"description": "Memory systems: build and query cost per conversation.",
            "params": {"systems": systems, "llm": llm_desc, "dataset": cfg.dataset},
            "columns": [["system", "system"], ["ingest_s_per_conv", "ingest s/conv"],
                        ["llm_calls_per_conv", "LLM calls/conv"], ["construction_tokens_per_conv", "build tokens/conv"],
                        ["query_p50_ms", "query p50 ms"], ["query_p95_ms", "query p95 ms"],
                        ["tokens_per_question", "tokens/question"], ["memory_items_per_conv", "items/conv"],
                        ["store_kb", "store KB"]],
            "rows": rows, "notes": notes, "unknown_prompts": unknown}
