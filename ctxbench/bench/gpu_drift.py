"""``bench suite=gpu``, part ``drift``: StreamingLLM's bf16 key drift on the device, before and after
its fix (:func:`ctxbench.bench.press_drift.rotation_drift`: a one-layer Llama with one head of
``head_dim`` in bf16, ``segments`` segments of ``segment_len`` tokens through M = ``mem_size`` slots
with ``n_sink`` sinks; rotation ``bf16`` = the re-rotation before the fix, ``fp32`` = the runner's)."""
from __future__ import annotations

from typing import Any

TINY = {"segments": 60}  # gpu.size=tiny: a few seconds on a CPU
KEYS = ("segments", "segment_len", "mem_size", "n_sink", "head_dim")


def run_part(cfg: Any, device: Any, budget: Any, size: str) -> dict[str, Any]:
    from ctxbench.bench.common import rnd
    from ctxbench.bench.gpu_rows import guarded
    from ctxbench.bench.press_drift import rotation_drift

    s = {**{k: int(cfg[k]) for k in KEYS}, **(TINY if size == "tiny" else {})}
    rows: list[dict[str, Any]] = []
    for rotation in ("bf16", "fp32"):
        rows += guarded({"rotation": rotation, "fix": "before" if rotation == "bf16" else "after"},
                        lambda: {k: rnd(v, 6) for k, v in rotation_drift(rotation=rotation, device=device, **s).items()},
                        budget)
    return {"title": f"drift: StreamingLLM keys in bf16 after {s['segments']} segments, before and after the fp32 "
                     "re-rotation fix",
            "params": s,
            "columns": [["fix", "fix"], ["rotation", "re-rotation"], ["sink_median", "sink keys median rel. error"],
                        ["sink_max", "sink max"], ["window_max", "window keys max"],
                        ["logit_err_max", "max attention-logit error"], ["logit_abs_max", "max |logit|"]],
            "rows": rows,
            "notes": ["error against the plain model's own key for the same token at the same slot; on a CPU after "
                      "400 segments (docs/compression-methods.md): sinks 19.6% median / 27.0% max → 0, logit error "
                      "0.029 → 0.0008."]}
