"""``suite=kv_memory``: memory kept vs context length for the compression methods.

For each method and length N, the method (built from ``conf/method/<name>.yaml`` through the real
``train`` config) ingests a document history of N tokens and answers one question; the numbers are
the method's own reporting in that answer's :class:`Usage`: ``memory_items`` (slots it keeps: KV
slots per layer and head for the fixed caches, COMP slots for CCM, memory slots for ICAE) and
``kv_bytes`` (bytes of the keys/values the answer is decoded from). ``kv_entries`` = kv_bytes /
(head_dim × bytes per element): key and value vectors over layers and KV heads, comparable across
methods. Peak memory is the resident set size of this process during ingest + answer above the RSS
before it (a fresh method per cell, so earlier states are freed).
"""
from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

from ctxbench.core.paths import conf_dir, samples_dir
from ctxbench.core.registry import register
from ctxbench.bench.common import MB, PeakMemory, compose, is_registered, rnd

TEXT = samples_dir() / "text_sample.txt"


def document_ids(tokenizer: Any, n: int) -> list[int]:
    """``n`` token ids of the shipped sample text, repeated as often as needed."""
    text = TEXT.read_text(encoding="utf-8") if TEXT.exists() else "The quick brown fox jumps over the lazy dog. "
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"{TEXT}: no tokens")
    reps = n // len(ids) + 1
    return (ids * reps)[:n]


def kv_geometry(model: Any) -> dict[str, int]:
    conf = model.config
    heads = conf.num_attention_heads
    head_dim = getattr(conf, "head_dim", None) or conf.hidden_size // heads
    elem = next(model.parameters()).element_size()
    return {"layers": conf.num_hidden_layers, "kv_heads": getattr(conf, "num_key_value_heads", None) or heads,
            "head_dim": head_dim, "bytes_per_element": elem}


def measure(name: str, n: int, cfg: Any) -> dict[str, Any]:
    """Build ``name``, ingest an N-token document, answer one question; the Usage it reports."""
    import torch

    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build
    from ctxbench.core.types import History, Question

    overrides = [f"method={name}", f"model={cfg.model}",
                 f"++method.max_new_tokens={int(cfg.max_new_tokens)}",
                 *list((cfg.overrides or {}).get(name, []) or [])]
    tcfg = compose("train", overrides)
    torch.manual_seed(0)
    bundle = load_model(tcfg.model)
    method = build("method", tcfg.method, bundle=bundle)
    method.eval()
    geo = kv_geometry(bundle.model)
    text = bundle.tokenizer.decode(document_ids(bundle.tokenizer, n))
    history = History(id=f"doc-{n}", text=text)
    question = Question(id="q", question="What is the text about?", answer="")
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        with torch.no_grad():
            method.ingest(history)
        t_ingest = time.perf_counter() - t0
        t1 = time.perf_counter()
        with torch.no_grad():
            pred = method.answer(question)
        t_answer = time.perf_counter() - t1
    u = pred.usage
    per_entry = geo["head_dim"] * geo["bytes_per_element"]
    row = {"method": name, "tokens": n, "status": "ok", "memory_items": int(u.memory_items),
           "kv_bytes": int(u.kv_bytes), "kv_entries": int(u.kv_bytes // per_entry) if u.kv_bytes else 0,
           "kv_mb": rnd(u.kv_bytes / MB, 3), "peak_extra_mb": rnd(mem.delta / MB, 1), "peak_exact": mem.exact,
           "ingest_s": rnd(t_ingest, 3), "answer_s": rnd(t_answer, 3),
           "history_tokens": int(u.extra.get("history_tokens") or u.extra.get("context_tokens_total") or n)}
    del method, bundle, pred
    gc.collect()
    return row


@register("bench", "kv_memory")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    from tqdm.auto import tqdm

    lengths = [int(x) for x in cfg.lengths]
    methods = [str(m) for m in cfg.methods]
    rows: list[dict[str, Any]] = []
    cells = [(m, n) for m in methods for n in lengths]
    failed: dict[str, str] = {}
    for m, n in tqdm(cells, desc="kv_memory", leave=False):
        if not is_registered("method", m):
            failed.setdefault(m, "not registered (method module missing)")
        if not (Path(conf_dir() / "method" / f"{m}.yaml")).exists():
            failed.setdefault(m, f"no conf/method/{m}.yaml")
        if m in failed:
            continue
        try:
            rows.append(measure(m, n, cfg))
        except MemoryError:
            rows.append({"method": m, "tokens": n, "status": "skipped", "reason": "out of memory"})
        except Exception as e:  # noqa: BLE001 - recorded; longer lengths of this method are skipped
            failed[m] = f"{type(e).__name__} at {n} tokens: {str(e).splitlines()[0] if str(e) else ''}"
    for m, why in failed.items():
        rows.append({"method": m, "status": "skipped", "reason": why})
    full = {r["tokens"]: r for r in rows if r.get("method") == "full_cache" and r["status"] == "ok"}
    for r in rows:
        ref = full.get(r.get("tokens"))
        if r["status"] == "ok" and ref and ref["kv_bytes"]:
            r["kv_vs_full"] = rnd(r["kv_bytes"] / ref["kv_bytes"])
    model = cfg.model
    return {"description": f"Memory kept after ingesting a document of N tokens, model={model}, as each method "
                           "reports it in Usage (memory_items, kv_bytes).",
            "params": {"model": model, "lengths": lengths, "methods": methods,
                       "overrides": {k: list(v) for k, v in (cfg.overrides or {}).items()}},
            "columns": [["method", "method"], ["tokens", "tokens"], ["memory_items", "slots (memory_items)"],
                        ["kv_entries", "KV entries"], ["kv_mb", "KV MB"], ["kv_vs_full", "KV ÷ full cache"],
                        ["peak_extra_mb", "peak +MB"], ["ingest_s", "ingest s"]],
            "rows": rows,
            "notes": ["slots: per layer and KV head for the fixed caches (full_cache, StreamingLLM, H2O, LoCoCo), "
                      "COMP-token slots for CCM, memory slots (decoder positions) for ICAE.",
                      "KV entries = key + value vectors over layers × KV heads (kv_bytes ÷ (head_dim × bytes per "
                      "element)); full_cache is the full-context reference at the same length.",
                      "peak +MB = resident set size during ingest + one answer above the RSS before it."]}
