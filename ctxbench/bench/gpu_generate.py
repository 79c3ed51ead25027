"""``bench suite=gpu``, part ``generate``: ``llm=hf`` batched generation on a 7B shape in bf16.

The chat backend eval uses (``llm=hf``, built through the registry on a random-init model of
``gpu.generate.model``'s published shapes with the byte-level tiny tokenizer) answers
``max(batches)`` different prompts of ``prompt_tokens`` tokens with ``chat_batch`` at
``llm.batch_size`` = each of ``batches`` (1 / 8 / 32: the batch sizes interleaved, ``repeats``
rounds after one warm-up call each). Random weights could stop a row at any time on a stop token,
so the stop tokens' rows of the (untied) LM head are zeroed: every reply runs to ``new_tokens``
(checked: a shorter reply is an error row), and generated tokens/s compare like for like.
Goal (issue 42): batch 32 ≥ 10× the tokens/s of batch 1.
"""
from __future__ import annotations

import time
from typing import Any

from ctxbench.bench.common import median, rnd

TINY = {"prompt_tokens": 64, "new_tokens": 8, "repeats": 1}  # gpu.size=tiny: seconds on a CPU


def settings(cfg: Any, size: str) -> dict[str, Any]:
    s = {k: cfg[k] for k in ("model", "batches", "prompt_tokens", "new_tokens", "repeats", "goal")}
    s["batches"] = [int(b) for b in s["batches"]]
    return {**s, **(TINY if size == "tiny" else {})}


def prompts(tokenizer: Any, n: int, tokens: int) -> list[list[dict[str, str]]]:
    """``n`` different one-message conversations of about ``tokens`` tokens each (the shipped text)."""
    from ctxbench.core.paths import samples_dir

    text = (samples_dir() / "shakespeare_sample.txt").read_text()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(ids) < (n + 1) * tokens:
        ids = ids + ids
    step = max(1, (len(ids) - tokens) // n)
    return [[{"role": "user", "content": tokenizer.decode(ids[i * step:i * step + tokens])}] for i in range(n)]


def never_stop(model: Any, tokenizer: Any) -> list[int]:
    """Zero the LM head rows of every stop token (the model's and the tokenizer's), so greedy decoding
    of a random model never picks one (another token's logit is above 0 almost surely)."""
    import torch

    ids = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>"), model.config.eos_token_id,
           getattr(model.generation_config, "eos_token_id", None)}
    flat = sorted({int(i) for x in ids if x is not None for i in (x if isinstance(x, (list, tuple)) else [x])})
    with torch.no_grad():
        model.get_output_embeddings().weight[flat] = 0
    return flat


def run_part(cfg: Any, device: Any, budget: Any, size: str, seed: int) -> dict[str, Any]:
    import torch

    from ctxbench.bench.gpu_models import build_bundle
    from ctxbench.bench.gpu_rows import guarded
    from ctxbench.config.compose import option_config
    from ctxbench.core.registry import build

    s = settings(cfg, size)
    batches, n_new = s["batches"], int(s["new_tokens"])
    state: dict[str, Any] = {}

    def setup() -> dict[str, Any]:
        bundle = build_bundle(str(s["model"]), size, "sdpa", device, False, seed)
        bundle.model.config.use_cache = True
        bundle.model.generation_config.use_cache = True
        stops = never_stop(bundle.model, bundle.tokenizer)
        convs = prompts(bundle.tokenizer, max(batches), int(s["prompt_tokens"]))
        llms = {b: build("llm", option_config("llm", {"name": "hf", "cache": False, "prefix_cache": False,
                                                      "constrained": False, "batch_size": b,
                                                      "context_window": int(s["prompt_tokens"]) + n_new + 64}),
                         bundle=bundle) for b in batches}
        state.update(llms=llms, convs=convs)
        return {"stop_ids_zeroed": stops, "dtype": str(bundle.model.dtype).replace("torch.", "")}

    def call(b: int) -> tuple[float, list[Any]]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = state["llms"][b].chat_batch(state["convs"][:b], max_new_tokens=n_new)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, out

    rows = guarded({"batch": "setup"}, setup, budget)
    if rows[0]["status"] != "ok":
        return table(s, rows)
    rows = []
    times: dict[int, list[float]] = {b: [] for b in batches}
    replies: dict[int, list[Any]] = {}
    errors: dict[int, dict[str, Any]] = {}
    for rnd_i in range(int(s["repeats"]) + 1):  # round 0 is the warm-up
        for b in batches:
            if b in errors:
                continue
            got = guarded({"batch": b}, lambda: dict(zip(("s", "out"), call(b))), budget)[0]
            if got["status"] != "ok":
                errors[b] = got
                continue
            if rnd_i:
                times[b].append(got["s"])
            replies[b] = got["out"]
    for b in batches:
        if b in errors:
            rows.append(errors[b])
            continue
        out = replies[b]
        short = [r.completion_tokens for r in out if r.completion_tokens != n_new]
        if short:
            rows.append({"batch": b, "status": "error",
                         "reason": f"{len(short)} of {len(out)} replies stopped early ({short[:4]} tokens, "
                                   f"{n_new} asked): a stop token was generated"})
            continue
        t = float(median(times[b] or [float("nan")]))
        rows.append({"batch": b, "status": "ok", "prompts": len(out), "new_tokens": n_new,
                     "prompt_tokens": round(sum(r.prompt_tokens for r in out) / len(out)),
                     "generate_s": rnd(t), "tokens_per_s": rnd(len(out) * n_new / t, 1)})
    one = next((r for r in rows if r["batch"] == 1 and r["status"] == "ok"), None)
    for r in rows:
        if one and r["status"] == "ok":
            r["vs_batch_1"] = rnd(r["tokens_per_s"] / one["tokens_per_s"], 2)
            if r["batch"] == max(batches) and r["batch"] > 1:
                r["goal"], r["met"] = f"≥ {s['goal']}× batch 1", r["vs_batch_1"] >= float(s["goal"])
    return table(s, rows)


def table(s: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"title": f"generate: llm=hf chat_batch on a random {s['model']} ({s['prompt_tokens']}-token prompts, "
                     f"{s['new_tokens']} new tokens each)",
            "params": s,
            "columns": [["batch", "batch"], ["prompts", "prompts"], ["prompt_tokens", "prompt tokens"],
                        ["new_tokens", "new tokens"], ["generate_s", "chat_batch s"],
                        ["tokens_per_s", "generated tok/s"], ["vs_batch_1", "÷ batch 1"], ["goal", "goal"],
                        ["met", "met"]],
            "rows": rows,
            "notes": ["llm=hf built through the registry (cache, prefix cache and grammar off); the stop tokens' "
                      "LM-head rows zeroed so every reply decodes all new tokens; batch sizes interleaved, medians "
                      f"over {s['repeats']} round(s) after a warm-up. Goal: batch {max(s['batches'])} ≥ "
                      f"{s['goal']}× batch 1's tokens/s."]}
