"""``bench suite=gpu``, part ``smoke``: the GPU path is correct, not only fast.

For each of ``gpu.smoke.methods`` (ICAE pretraining and CCM concat by default), on a tiny random
Llama built through the registry as ``ctxbench train`` builds it:

- ``fp32``: the same method (same seed, same weights, the same collated batch) stepped once on the
  CPU and once on ``gpu.device`` in fp32: the loss of the step and the loss after the AdamW update
  agree to ``tol`` (``max_abs_diff``); with no GPU the device is the CPU too, so the path still runs;
- ``bf16``: the method on a bf16 base on the device, one step under bf16 autocast as train.py's
  loop runs it: the loss is finite, and every trainable parameter and its gradient stays float32
  (the fp32 master weights of methods/base.py).
"""
from __future__ import annotations

from typing import Any

from ctxbench.bench.common import compose, rnd

LR = 1e-3  # large enough that the update moves the second loss visibly


def build_method(key_spec: Any, dataset: str, dtype: str, seed: int) -> tuple[Any, Any, Any]:
    """(method on the CPU, its train config, the training samples) on a tiny random Llama in ``dtype``."""
    import torch

    from ctxbench.config.compose import option_config
    from ctxbench.core.registry import build
    from ctxbench.models.loading import load_model

    cfg = compose("train", [f"method={key_spec['method']}", "model=tiny", f"dataset={dataset}",
                            *[str(o) for o in key_spec.get("overrides") or []]])
    bundle = load_model(option_config("model", {"name": "tiny", "dtype": dtype, "device": "cpu",
                                                "attn_implementation": "sdpa", "seed": seed}))
    torch.manual_seed(seed)
    method = build("method", cfg.method, bundle=bundle)
    return method, cfg, build("dataset", cfg.dataset)


def step(method: Any, batch: dict[str, Any], device: Any, autocast: bool) -> dict[str, Any]:
    """One training step (forward, backward, AdamW) and the loss after it."""
    import torch
    from accelerate.utils import send_to_device

    batch = send_to_device(batch, device)
    method.to(device).train()
    params = [p for p in method.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR)
    ctx = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if autocast else torch.autocast(
        device_type=device.type, enabled=False)
    with ctx:
        out = method(batch)
    out.loss.backward()
    grad_dtypes = sorted({str(p.grad.dtype).replace("torch.", "") for p in params if p.grad is not None})
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad(), ctx:
        after = method(batch)
    return {"loss": float(out.loss.detach()), "loss_after": float(after.loss.detach()), "grad_dtypes": grad_dtypes,
            "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
            "base_dtype": str(next((p.dtype for p in method.parameters() if not p.requires_grad), None)).replace("torch.", ""),
            "trainable": sum(p.numel() for p in params)}


def fp32_row(spec: Any, dataset: str, device: Any, seed: int, tol: float) -> dict[str, Any]:
    import torch

    method, _, samples = build_method(spec, dataset, "float32", seed)
    batch = method.collate(method.train_examples(samples)[:1])
    twin, _, _ = build_method(spec, dataset, "float32", seed)
    cpu = step(method, batch, torch.device("cpu"), autocast=False)
    dev = step(twin, batch, device, autocast=False)
    diff = max(abs(cpu["loss"] - dev["loss"]), abs(cpu["loss_after"] - dev["loss_after"]))
    ok = diff <= tol and cpu["loss_after"] != cpu["loss"]
    return {"status": "ok" if ok else "error", "loss_cpu": rnd(cpu["loss"], 6), "loss_device": rnd(dev["loss"], 6),
            "loss_after_cpu": rnd(cpu["loss_after"], 6), "loss_after_device": rnd(dev["loss_after"], 6),
            "max_abs_diff": float(f"{diff:.3g}"), "tol": tol, "trainable_dtypes": dev["param_dtypes"],
            **({} if ok else {"reason": f"CPU and {device} losses differ by {diff:.3g} (tol {tol})"
                              if diff > tol else "the AdamW step did not change the loss"})}


def bf16_row(spec: Any, dataset: str, device: Any, seed: int) -> dict[str, Any]:
    import math

    method, _, samples = build_method(spec, dataset, "bfloat16", seed)
    batch = method.collate(method.train_examples(samples)[:1])
    got = step(method, batch, device, autocast=True)
    bad = []
    if got["base_dtype"] != "bfloat16":
        bad.append(f"the frozen base is {got['base_dtype']}, not bfloat16")
    if got["param_dtypes"] != ["float32"] or got["grad_dtypes"] != ["float32"]:
        bad.append(f"trainables {got['param_dtypes']} with gradients {got['grad_dtypes']}, not float32")
    if not (math.isfinite(got["loss"]) and math.isfinite(got["loss_after"])):
        bad.append(f"loss {got['loss']} → {got['loss_after']}")
    return {"status": "error" if bad else "ok", "loss_device": rnd(got["loss"], 6),
            "loss_after_device": rnd(got["loss_after"], 6), "base_dtype": got["base_dtype"],
            "trainable_dtypes": got["param_dtypes"], "grad_dtypes": got["grad_dtypes"],
            **({"reason": "; ".join(bad)} if bad else {})}


def run_part(cfg: Any, device: Any, budget: Any, seed: int) -> dict[str, Any]:
    from ctxbench.bench.gpu_rows import guarded

    tol, dataset = float(cfg.tol), str(cfg.dataset)
    rows: list[dict[str, Any]] = []
    for key, spec in (cfg.methods or {}).items():
        rows += guarded({"method": str(key), "check": "fp32 CPU vs device"},
                        lambda: fp32_row(spec, dataset, device, seed, tol), budget, device)
        rows += guarded({"method": str(key), "check": "bf16 base, fp32 trainables"},
                        lambda: bf16_row(spec, dataset, device, seed), budget, device)
    return {"title": f"smoke: one training step on {device} against the CPU in fp32, and under a bf16 base",
            "params": {"tol": tol, "dataset": dataset,
                       "methods": {str(k): [str(v["method"]), *[str(o) for o in v.get("overrides") or []]]
                                   for k, v in (cfg.methods or {}).items()}},
            "columns": [["method", "method"], ["check", "check"], ["loss_cpu", "loss (CPU)"],
                        ["loss_device", "loss (device)"], ["loss_after_cpu", "after step (CPU)"],
                        ["loss_after_device", "after step (device)"], ["max_abs_diff", "max |Δ|"],
                        ["trainable_dtypes", "trainables"], ["grad_dtypes", "gradients"]],
            "rows": rows,
            "notes": [f"fp32: the same seed, weights and batch stepped on the CPU and on {device} (AdamW lr {LR}); "
                      f"|Δ| over the step's loss and the loss after it must be ≤ {tol}. bf16: one autocast step on a "
                      "bf16 base; trainables and their gradients must stay float32."]}
