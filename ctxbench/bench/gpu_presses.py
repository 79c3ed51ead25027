"""``bench suite=gpu``, part ``presses``: each press's ingest and decode against the plain model on
a random 7B shape in bf16, measured by ``bench suite=kv_press``'s own ``presses`` (called, not
copied: ingest tok/s vs one plain forward over the same tokens, decode tok/s vs plain ``generate``
from a cache of the same length). It is handed the random bundle (its ids are made on the model's
device, and its clock waits for the GPU's queued work before it reads the time); the tensors the
presses make for themselves are made on the device by default while it runs.
"""
from __future__ import annotations

from typing import Any

TINY = {"segment_len": 64, "mem_size": 128, "ingest_tokens": 256, "new_tokens": 4, "repeats": 1}
KEYS = ("model", "methods", "dataset", "segment_len", "mem_size", "ingest_tokens", "new_tokens", "repeats")


def settings(cfg: Any, size: str) -> dict[str, Any]:
    s = {k: cfg[k] for k in KEYS}
    s["methods"] = [str(m) for m in s["methods"]]
    return {**s, **(TINY if size == "tiny" else {})}


def run_part(cfg: Any, device: Any, budget: Any, size: str, seed: int) -> dict[str, Any]:
    import torch
    from omegaconf import OmegaConf

    from ctxbench.bench import kv_press
    from ctxbench.bench.gpu_models import build_bundle
    from ctxbench.bench.gpu_rows import guarded

    s = settings(cfg, size)

    def measure() -> list[dict[str, Any]]:
        bundle = build_bundle(str(s["model"]), size, "sdpa", device, False, seed)
        bundle.model.config.use_cache = True
        with torch.device(device):
            return kv_press.presses(OmegaConf.create(s), bundle=bundle)

    rows = guarded({"method": "presses"}, measure, budget, device)
    if rows[0]["status"] != "ok":
        rows = [{**r, "method": ", ".join(s["methods"])} for r in rows]
    return {"title": f"presses: ingest and decode through each press vs the plain model, random {s['model']} "
                     f"(B={s['segment_len']}, M={s['mem_size']}, {s['ingest_tokens']} tokens)",
            "params": s,
            "columns": [["method", "press"], ["tokens", "tokens"], ["segment_len", "B"], ["mem_size", "M"],
                        ["ingest_tok_s", "ingest tok/s"], ["plain_forward_tok_s", "plain forward tok/s"],
                        ["ingest_vs_forward", "ingest ÷ forward"], ["decode_tok_s", "decode tok/s"],
                        ["generate_tok_s", "generate (no press) tok/s"], ["decode_vs_generate", "decode ÷ generate"]],
            "rows": rows,
            "notes": ["measured by ctxbench.bench.kv_press.presses (its forwards and ingests timed round-robin, "
                      f"medians over {s['repeats']} repeat(s)), with the GPU synchronised before each clock read; "
                      "ratios are speeds (1.0 = as fast as the plain model)."]}
