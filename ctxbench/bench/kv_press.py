"""``suite=kv_press``: what the presses cost against the plain model, as ratios measured in one run.

Three checks, each timing both sides in this process, interleaved, medians over ``repeats``:

- ``calibration``: one LoCoCo calibration step (``method=lococo``: ``n_segments`` segments of
  ``segment_len`` tokens through the fixed cache, forward + backward + AdamW) against one LoRA LM
  training step (``method=lm``, LoRA on every projection) over the same ``segment_len × n_segments``
  tokens in one window; and against a plain no-grad forward of those tokens (goal: ≤ 2.0× the
  LoRA step).
- ``ingest``: tokens/s of streaming ``ingest_tokens`` tokens through each press in segments of
  ``segment_len`` at M = mem_size (no grad), against a plain forward of the same tokens in one call
  (and against one that computes only the last token's logits; and the plain decoder fed the same
  segments, no press, to show what segmenting costs by itself); and the CPU preset of issue 39 the
  kvpress way, as ``task=compression`` runs it: each method as configured, set to ``preset_ratio``
  (:meth:`FixedKVMethod.ingest_plan`: ``preset_tokens`` in one prefill compressed to
  M = ⌈(1 − r) × tokens⌉; LoCoCo with its calibrated compressor). Goal on both: ≥ 0.67× the
  forward's tokens/s; a row below it names the kernels that hold it back (:func:`held_back`: one
  profiled ingest against one profiled forward, the ops with the most time beyond the forward's).
- ``decode``: new tokens/s of each press's answer (the question segment, then ``model.generate``
  from its cache of M slots) against ``model.generate`` without a press from a cache prefilled with
  M + the question but its last token (the same length; the copy of that cache is timed too). No
  stop token, so every run decodes ``new_tokens``.
"""
from __future__ import annotations

import math
import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import compose, median, rnd

GOAL = 0.67  # issue 39 / 41: a press ingests at ≥ 0.67× the tokens/s of one plain forward over the same tokens


def _text_ids(tokenizer: Any, dataset: str, n: int) -> list[int]:
    from ctxbench.core.registry import build

    cfg = compose("train", [f"dataset={dataset}"])
    text = "\n".join(s.history.render() for s in build("dataset", cfg.dataset))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"bench kv_press: dataset={dataset} has no text")
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def _method(name: str, model: str, bundle: Any, overrides: list[str]) -> Any:
    from ctxbench.core.registry import build

    cfg = compose("train", [f"method={name}", f"model={model}", *overrides])
    return build("method", cfg.method, bundle=bundle)


def _bundle(model: str) -> Any:
    from ctxbench.models.loading import load_model

    return load_model(compose("train", [f"model={model}"]).model)


def _clock() -> float:
    """``time.perf_counter()`` once the GPU's queued work is done (when CUDA is in use): on a GPU a
    call returns at its kernels' launch, so an unsynchronised clock would time the launches only."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def _time(fn: Any, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return float(median(times))


def calibration(cfg: Any) -> dict[str, Any]:
    import torch

    model, B, n_seg = str(cfg.model), int(cfg.segment_len), int(cfg.n_segments)
    n = B * n_seg
    repeats = int(cfg.repeats)

    def stepper(method: Any, batch: dict[str, torch.Tensor]):
        params = [p for p in method.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        method.train()

        def step() -> None:
            out = method(batch)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    lococo = _method("lococo", model, _bundle(model),
                     [f"method.segment_len={B}", f"method.n_segments={n_seg}", f"method.mem_size={int(cfg.mem_size)}"])
    ids = torch.tensor([_text_ids(lococo.tokenizer, str(cfg.dataset), n)])
    lm = _method("lm", model, _bundle(model), [f"method.seq_len={n}"])
    plain = _bundle(model).model.eval()
    steps = {"lococo": stepper(lococo, {"input_ids": ids}),
             "lm": stepper(lm, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})}

    def forward() -> None:
        with torch.no_grad():
            plain(input_ids=ids)

    t = {"plain_forward": [], "lococo": [], "lm": []}
    for _ in range(int(cfg.rounds)):  # interleaved: drifts of a shared machine hit both sides
        t["lm"].append(_time(steps["lm"], repeats))
        t["lococo"].append(_time(steps["lococo"], repeats))
        t["plain_forward"].append(_time(forward, repeats))
    s = {k: float(median(v)) for k, v in t.items()}
    return {"check": "calibration", "compared": f"LoCoCo calibration step vs LoRA LM step, {n} tokens (B={B}×{n_seg})",
            "tokens": n, "lococo_step_s": rnd(s["lococo"]), "lora_step_s": rnd(s["lm"]),
            "plain_forward_s": rnd(s["plain_forward"]), "ratio": rnd(s["lococo"] / s["lm"], 3),
            "vs_forward": rnd(s["lococo"] / s["plain_forward"], 3), "goal": "≤ 2.0× the LoRA step",
            "met": s["lococo"] / s["lm"] <= 2.0, "status": "ok"}


def _ingest_rounds(lm: Any, ids: Any, runners: dict[str, Any], B: int, repeats: int) -> dict[str, float]:
    """Median seconds of the plain forward (all logits; only the last token's) and of each press's
    ingest over the same tokens, timed round-robin ``repeats`` times after one warm-up of each, so a
    drift of a shared machine hits every side of a ratio alike."""
    import torch

    from ctxbench.methods.kv_cache import KVState

    def forward(keep: int) -> Any:
        def run() -> None:
            with torch.no_grad():
                lm(input_ids=ids, **({"logits_to_keep": keep} if keep else {}))
        return run

    def ingest(runner: Any) -> Any:
        def run() -> None:
            with torch.no_grad():
                runner.stream(KVState(), ids, B)
        return run

    def segmented() -> None:  # the plain decoder fed the same segments over a growing DynamicCache, no press
        from transformers import DynamicCache

        from ctxbench.methods.press_hooks import decoder_of
        from ctxbench.models.loading import cache_kwarg

        with torch.no_grad():
            cache = DynamicCache()
            for s in range(0, ids.shape[1], B):
                decoder_of(lm)(input_ids=ids[:, s: s + B], use_cache=True, **{cache_kwarg(lm): cache})

    sides = {"forward": forward(0), "forward_last": forward(1),
             **({"segmented": segmented} if B < ids.shape[1] else {}), **{n: ingest(r) for n, r in runners.items()}}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for k, fn in sides.items():
        fn()
    for _ in range(repeats):
        for k, fn in sides.items():
            times[k].append(_time(fn, 1, warmup=0))
    return {k: float(median(v)) for k, v in times.items()}


def held_back(lm: Any, ids: Any, runner: Any, B: int, top: int = 3) -> str:
    """The ops (torch.profiler, self CPU time) where one ingest through ``runner`` spends the most
    beyond one plain forward of the same tokens, e.g. "aten::mkldnn_convolution +0.85 s, aten::mm
    +0.60 s (forward 3.1 s, ingest 4.9 s)": what holds a press below the goal."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ctxbench.methods.kv_cache import KVState

    def self_times(fn: Any) -> tuple[dict[str, float], float]:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            fn()
            wall = time.perf_counter() - t0
        return {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}, wall

    fwd, t_fwd = self_times(lambda: lm(input_ids=ids))
    ing, t_ing = self_times(lambda: runner.stream(KVState(), ids, B))
    extra = sorted(((v - fwd.get(k, 0.0), k) for k, v in ing.items()), reverse=True)[:top]
    ops = ", ".join(f"{k} +{d:.3g} s" for d, k in extra if d > 0)
    return f"{ops} (profiled: forward {t_fwd:.2f} s, ingest {t_ing:.2f} s)"


def _ingest_row(name: str, n: int, B: int, M: int, t: dict[str, float]) -> dict[str, Any]:
    ratio = rnd(t["forward"] / t[name], 3)
    return {"check": "ingest", "method": name, "tokens": n, "segment_len": B, "mem_size": M,
            "ingest_tok_s": rnd(n / t[name], 1), "plain_forward_tok_s": rnd(n / t["forward"], 1),
            "ingest_vs_forward": ratio, "ingest_vs_forward_last": rnd(t["forward_last"] / t[name], 3),
            **({"segmented_vs_forward": rnd(t["forward"] / t["segmented"], 3)} if "segmented" in t else {}),
            "goal": GOAL, "met": ratio >= GOAL, "status": "ok"}


def _explain(rows: list[dict[str, Any]], lm: Any, ids: Any, runners: dict[str, Any], B: int) -> None:
    """Each row below the goal gets ``held_back_by`` (:func:`held_back`)."""
    import torch

    for row in rows:
        if not row["met"]:
            with torch.no_grad():
                row["held_back_by"] = held_back(lm, ids, runners[row["method"]], int(row["segment_len"]))


def presses(cfg: Any, bundle: Any = None) -> list[dict[str, Any]]:
    """The streaming case: ``ingest_tokens`` in segments of B over M slots; ingest and decode. On
    ``bundle`` when given (the GPU check's random 7B model on its device), else ``conf/model/<cfg.model>``."""
    import torch

    from ctxbench.methods.kv_cache import KVState

    model, M, B = str(cfg.model), int(cfg.mem_size), int(cfg.segment_len)
    bundle = _bundle(model) if bundle is None else bundle
    lm = bundle.model.eval()
    n_in, n_new, repeats = int(cfg.ingest_tokens), int(cfg.new_tokens), int(cfg.repeats)
    ids = torch.tensor([_text_ids(bundle.tokenizer, str(cfg.dataset), n_in)], device=lm.device)
    q = ids[0, :16].tolist()
    pad = bundle.tokenizer.pad_token_id or 0

    import copy

    from transformers import DynamicCache

    from ctxbench.models.loading import cache_kwarg

    prompt = ids[:, :M + len(q) - 1]  # the M slots + the question the presses decode after
    prefilled = DynamicCache(config=lm.config)
    with torch.no_grad():
        lm(input_ids=prompt[:, :-1], use_cache=True, **{cache_kwarg(lm): prefilled})

    def plain_generate() -> None:  # from the prefilled cache, as the presses decode from theirs
        with torch.no_grad():
            lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **{cache_kwarg(lm): copy.deepcopy(prefilled)},
                        max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, pad_token_id=pad,
                        temperature=None, top_p=None, top_k=None)

    names = [str(x) for x in cfg.methods]
    runners = {}
    for name in names:
        m = _method(name, model, bundle, [f"method.segment_len={B}", f"method.mem_size={M}"])
        m.eval()
        runners[name] = m.runner()
    t = _ingest_rounds(lm, ids, runners, B, repeats)
    t_gen = _time(plain_generate, repeats)
    rows = []
    for name, runner in runners.items():
        with torch.no_grad():
            state = {"s": runner.stream(KVState(), ids, B)}

        def decode() -> None:
            out, _ = runner.generate(state["s"], q, n_new, [], pad, min_new_tokens=n_new)
            if len(out) != n_new:
                raise RuntimeError(f"{name}: decoded {len(out)} tokens, {n_new} asked")

        t_dec = _time(decode, repeats)
        rows.append({**_ingest_row(name, n_in, B, M, t), "check": "ingest+decode",
                     "decode_tok_s": rnd(n_new / t_dec, 1), "generate_tok_s": rnd(n_new / t_gen, 1),
                     "decode_vs_generate": rnd(t_gen / t_dec, 3)})
    _explain(rows, lm, ids, runners, B)
    return rows


def preset(cfg: Any) -> list[dict[str, Any]]:
    """Issue 39's CPU preset the kvpress way, as ``task=compression`` ingests it: each method as
    configured, set to ``preset_ratio``, ``preset_tokens`` in one segment (one prefill, then each
    layer compressed) to M = ⌈(1 − preset_ratio) × tokens⌉ slots."""
    import torch

    model, n, repeats = str(cfg.model), int(cfg.preset_tokens), int(cfg.repeats)
    bundle = _bundle(model)
    lm = bundle.model.eval()
    ids = torch.tensor([_text_ids(bundle.tokenizer, str(cfg.dataset), n)])
    runners, segment = {}, n
    for name in (str(x) for x in cfg.methods):
        m = _method(name, model, bundle, [])
        m.eval()
        m.set_compression_ratio(float(cfg.preset_ratio))
        runners[name], segment = m.ingest_plan(n)
    M = math.ceil((1 - float(cfg.preset_ratio)) * n)
    t = _ingest_rounds(lm, ids, runners, segment, repeats)
    rows = [{**_ingest_row(name, n, segment, M, t), "check": "preset"} for name in runners]
    _explain(rows, lm, ids, runners, segment)
    return rows


@register("bench", "kv_press")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    checks = [str(c) for c in cfg.checks]
    rows: list[dict[str, Any]] = []
    if "calibration" in checks:
        rows.append(calibration(cfg))
    extra_rows = presses(cfg) if "presses" in checks else []
    preset_rows = preset(cfg) if "presses" in checks and int(cfg.preset_tokens) else []
    ingest_cols = [["method", "press"], ["tokens", "tokens"], ["segment_len", "B"], ["mem_size", "M"],
                   ["ingest_tok_s", "ingest tok/s"], ["plain_forward_tok_s", "plain forward tok/s"],
                   ["ingest_vs_forward", "ingest ÷ forward"], ["ingest_vs_forward_last", "÷ forward, last logits only"],
                   ["segmented_vs_forward", "plain model in segments of B ÷ forward"],
                   ["goal", "goal"], ["met", "met"], ["held_back_by", "held back by (beyond the forward)"]]
    return {"description": f"KV presses vs the plain model, model={cfg.model}, ratios measured in one run "
                           f"(medians over {cfg.repeats} repeats).",
            "params": {k: (list(v) if k == "methods" else v) for k, v in cfg.items()},
            "columns": [["check", "check"], ["compared", "compared"], ["lococo_step_s", "LoCoCo step s"],
                        ["lora_step_s", "LoRA LM step s"], ["plain_forward_s", "plain forward s"],
                        ["ratio", "÷ LoRA step"], ["vs_forward", "÷ plain forward"], ["goal", "goal"]],
            "rows": rows,
            "tables": [{"title": "ingest and decode through each press (streaming in segments of B)",
                        "columns": [*ingest_cols, ["decode_tok_s", "decode tok/s"],
                                    ["generate_tok_s", "generate (no press) tok/s"],
                                    ["decode_vs_generate", "decode ÷ generate"]],
                        "rows": extra_rows},
                       {"title": f"ingest at the CPU preset: one segment of {cfg.preset_tokens} tokens to "
                                 f"M = ⌈(1 − {cfg.preset_ratio}) × tokens⌉ (kvpress: one prefill, then compress)",
                        "columns": ingest_cols, "rows": preset_rows}],
            "notes": ["ingest ÷ forward and decode ÷ generate are speed ratios (1.0 = as fast as the plain model); "
                      f"the goal is ingest ÷ forward ≥ {GOAL} (issues 39 and 41); a row below it names the ops "
                      "with the most time beyond one plain forward's (one profiled run of each).",
                      "the plain forward computes every token's logits, as `model(ids)` does; ingestion reads "
                      "none and runs the decoder alone (no LM head); '÷ forward, last logits only' compares with "
                      "a forward that computes one row (logits_to_keep=1).",
                      "the preset runs each method as `task=compression` does (its own config, set to the ratio: "
                      "LoCoCo's calibrated compressor at M = method.mem_size mixes its calibrated rows).",
                      "'plain model in segments of B ÷ forward': the plain decoder fed the same segments over a "
                      "growing cache, no press: what segments of B cost by themselves on this machine (a press "
                      "streaming in them cannot beat it by much).",
                      "the forwards and every press's ingest are timed round-robin, `repeats` rounds after a "
                      "warm-up; generate without a press decodes from a prefilled cache of M + question tokens, "
                      "the length the presses decode from; the presses' time includes their question segment."]}
