"""``bench suite=gpu``, part ``presses``: each press's ingest and decode against the plain model on
a random 7B shape in bf16, measured by ``bench suite=kv_press``'s own ``presses`` (called, not
copied: ingest tok/s vs one plain forward over the same tokens, decode tok/s vs plain ``generate``
from a cache of the same length).

``kv_press.presses`` is written for the CPU: it loads ``conf/model/<model>`` itself, makes its
token ids with the default device and reads ``time.perf_counter`` around asynchronous work. Here it
runs unchanged with three things around it: its model loader answers the random 7B bundle, the
default device is the GPU (so its ids are made there), and its clock synchronises the GPU before it
reads the time (else a plain forward would be timed at its kernel launches only).
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

TINY = {"segment_len": 64, "mem_size": 128, "ingest_tokens": 256, "new_tokens": 4, "repeats": 1}
KEYS = ("model", "methods", "dataset", "segment_len", "mem_size", "ingest_tokens", "new_tokens", "repeats")


def settings(cfg: Any, size: str) -> dict[str, Any]:
    s = {k: cfg[k] for k in KEYS}
    s["methods"] = [str(m) for m in s["methods"]]
    return {**s, **(TINY if size == "tiny" else {})}


class SyncedClock:
    """``time`` as kv_press uses it, with ``perf_counter`` waiting for the device's queued work first."""

    def __init__(self, device: Any):
        self.device = device

    def perf_counter(self) -> float:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextlib.contextmanager
def around_kv_press(bundle: Any, device: Any) -> Iterator[Any]:
    """kv_press with its model loader answering ``bundle``, its clock synchronised, the default
    device ``device``; all restored after."""
    import torch

    from ctxbench.bench import kv_press

    for name in ("_bundle", "time", "presses"):
        if not hasattr(kv_press, name):
            raise RuntimeError(f"ctxbench.bench.kv_press has no {name!r}: the gpu check's presses part "
                               "(ctxbench/bench/gpu_presses.py) needs updating")
    saved = kv_press._bundle, kv_press.time
    kv_press._bundle, kv_press.time = (lambda _model: bundle), SyncedClock(device)
    try:
        with torch.device(device):
            yield kv_press
    finally:
        kv_press._bundle, kv_press.time = saved


def run_part(cfg: Any, device: Any, budget: Any, size: str, seed: int) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from ctxbench.bench.gpu_models import build_bundle
    from ctxbench.bench.gpu_rows import guarded

    s = settings(cfg, size)

    def measure() -> list[dict[str, Any]]:
        bundle = build_bundle(str(s["model"]), size, "sdpa", device, False, seed)
        bundle.model.config.use_cache = True
        with around_kv_press(bundle, device) as kv_press:
            return kv_press.presses(OmegaConf.create(s))

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
