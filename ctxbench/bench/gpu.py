"""``bench suite=gpu``: the prepared GPU check (issue 42), one command (scripts/gpu_check.sh), one
output folder (bench.json + bench.md, a table per part), each part time-boxed.

Parts (``gpu.parts``, run in that order; each its own module):

- ``smoke`` (gpu_smoke.py): one ICAE and one CCM step on the device equal the CPU's in fp32, and
  trainables stay fp32 under a bf16 base;
- ``drift`` (gpu_drift.py): StreamingLLM's bf16 key drift after 400 segments, before and after its fix;
- ``generate`` (gpu_generate.py): ``llm=hf`` batched generation at batch 1 / 8 / 32 on a 7B shape;
- ``presses`` (gpu_presses.py): each press's ingest and decode vs a plain forward / ``generate``;
- ``train`` (gpu_train.py): bf16 training steps of LoRA-LM, ICAE, CCM and LoCoCo on the Llama-2-7B
  and Mistral-7B shapes: tokens/s, MFU, peak memory.

Models are built at random init on the published shapes (gpu_models.py). ``gpu.size=tiny`` runs
every part on small models on the CPU (the check cannot rot between GPU runs); ``gpu.size=7b``
needs a CUDA device and is sized for under 8 minutes on one H200: each part has its own
``budget_s`` inside ``gpu.budget_s``, past which no new row starts (the rows left are ``skipped``
with the reason). Every row is ``ok``, ``skipped`` or ``error``; scripts/gpu_check.sh exits
non-zero when any row is an error.
"""
from __future__ import annotations

import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import rnd
# re-exported: the names the check's models and training cells had here before the split
from ctxbench.bench.gpu_models import (H200_BF16_DENSE, SHAPES, build_bundle, device_of, flash_available,  # noqa: F401
                                       flops_params, free, model_config)
from ctxbench.bench.gpu_train import TokenCounter, measure  # noqa: F401

PARTS = ("smoke", "drift", "generate", "presses", "train")


def run_one(part: str, cfg: Any, device: Any, budget: Any) -> dict[str, Any]:
    from ctxbench.bench import gpu_drift, gpu_generate, gpu_presses, gpu_smoke, gpu_train

    size, seed = str(cfg.size), int(cfg.seed)
    if part == "train":
        return gpu_train.run_part(cfg, device, budget)
    sub = cfg[part]
    if part == "smoke":
        return gpu_smoke.run_part(sub, device, budget, seed)
    if part == "drift":
        return gpu_drift.run_part(sub, device, budget, size)
    if part == "generate":
        return gpu_generate.run_part(sub, device, budget, size, seed)
    return gpu_presses.run_part(sub, device, budget, size, seed)


def run_parts(cfg: Any, device: Any) -> dict[str, dict[str, Any]]:
    from ctxbench.bench.gpu_rows import Budget, reason

    budget = Budget(float(cfg.budget_s))
    out: dict[str, dict[str, Any]] = {}
    for part in [str(p) for p in cfg.parts]:
        if part not in PARTS:
            raise ValueError(f"gpu.parts: unknown part {part!r} (one of {', '.join(PARTS)})")
        if part == "train":
            budget.start(part, float(cfg.train_budget_s), "gpu.train_budget_s")
        else:
            budget.start(part, float(cfg[part].budget_s))
        print(f"bench gpu: part {part} ...", flush=True)
        t0 = time.perf_counter()
        try:
            res = run_one(part, cfg, device, budget)
        except Exception as e:  # noqa: BLE001 - a part that cannot start is one error row, the others run
            res = {"title": part, "columns": [["part", "part"]], "rows": [{"part": part, "status": "error",
                                                                           "reason": reason(e)}]}
        res["seconds"] = rnd(time.perf_counter() - t0, 1)
        print(f"bench gpu: part {part} done in {res['seconds']} s", flush=True)
        out[part] = res
    return out


@register("bench", "gpu")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    import torch

    device = device_of(cfg)
    t_start = time.perf_counter()
    parts = run_parts(cfg, device)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    train = parts.get("train", {"rows": [], "columns": [], "notes": []})
    counts = {s: sum(r.get("status") == s for p in parts.values() for r in p["rows"]) for s in ("ok", "skipped", "error")}
    notes = [f"model weights random (AutoModelForCausalLM.from_config on the published shapes), size={cfg.size}, "
             f"device={device}{f' ({gpu_name})' if gpu_name else ''}; rows: {counts['ok']} ok, "
             f"{counts['skipped']} skipped, {counts['error']} error(s).",
             *[f"{p}: {res['seconds']} s" for p, res in parts.items()], *train.get("notes", [])]
    return {"description": "the GPU check (issue 42): correctness smoke, StreamingLLM bf16 drift, llm=hf batched "
                           "generation, presses vs the plain model, bf16 training steps on the 7B shapes",
            "params": {"size": cfg.size, "device": str(device), "gpu": gpu_name, "parts": list(parts),
                       **train.get("params", {}), **{f"{p}": res.get("params") for p, res in parts.items() if p != "train"},
                       "torch": torch.__version__, "cuda": torch.version.cuda,
                       "transformers": _version("transformers")},
            "columns": train["columns"], "rows": train["rows"],
            "tables": [{"title": res["title"], "columns": res["columns"], "rows": res["rows"], "notes": res.get("notes", [])}
                       for p, res in parts.items() if p != "train"],
            "errors": counts["error"], "notes": notes, "seconds_measuring": rnd(time.perf_counter() - t_start, 1)}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
