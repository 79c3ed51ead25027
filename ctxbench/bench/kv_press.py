"""``suite=kv_press``: what the presses cost against the plain model, as ratios measured in one run.

Three checks, each timing both sides in this process, interleaved, medians over ``repeats``:

- ``calibration``: one LoCoCo calibration step (``method=lococo``: ``n_segments`` segments of
  ``segment_len`` tokens through the fixed cache, forward + backward + AdamW) against one LoRA LM
  training step (``method=lm``, LoRA on every projection) over the same ``segment_len × n_segments``
  tokens in one window; and against a plain no-grad forward of those tokens (goal: ≤ 2.0× the
  LoRA step).
- ``ingest``: tokens/s of streaming ``ingest_tokens`` tokens through each press at M = mem_size
  (no grad), against a plain forward of the same tokens in one call.
- ``decode``: new tokens/s of each press's answer (the question segment, then ``model.generate``
  from its cache of M slots) against ``model.generate`` without a press from a cache prefilled with
  M + the question but its last token (the same length; the copy of that cache is timed too). No
  stop token, so every run decodes ``new_tokens``.
"""
from __future__ import annotations

import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import compose, median, rnd


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


def _time(fn: Any, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
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


def presses(cfg: Any) -> list[dict[str, Any]]:
    import torch

    from ctxbench.methods.kv_cache import KVState

    model, M, B = str(cfg.model), int(cfg.mem_size), int(cfg.segment_len)
    bundle = _bundle(model)
    lm = bundle.model.eval()
    n_in, n_new, repeats = int(cfg.ingest_tokens), int(cfg.new_tokens), int(cfg.repeats)
    ids = torch.tensor([_text_ids(bundle.tokenizer, str(cfg.dataset), n_in)])
    q = ids[0, :16].tolist()
    pad = bundle.tokenizer.pad_token_id or 0

    def plain_forward() -> None:
        with torch.no_grad():
            lm(input_ids=ids)

    import copy

    from transformers import DynamicCache

    prompt = ids[:, :M + len(q) - 1]  # the M slots + the question the presses decode after
    prefilled = DynamicCache(config=lm.config)
    with torch.no_grad():
        lm(input_ids=prompt[:, :-1], cache=prefilled, use_cache=True)

    def plain_generate() -> None:  # from the prefilled cache, as the presses decode from theirs
        with torch.no_grad():
            lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), cache=copy.deepcopy(prefilled),
                        max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, pad_token_id=pad,
                        temperature=None, top_p=None, top_k=None)

    t_fwd = _time(plain_forward, repeats)
    t_gen = _time(plain_generate, repeats)
    rows = []
    for name in cfg.methods:
        m = _method(str(name), model, bundle, [f"method.segment_len={B}", f"method.mem_size={M}"])
        m.eval()
        runner = m.runner()
        state: dict[str, Any] = {}

        def ingest() -> None:
            with torch.no_grad():
                state["s"] = runner.stream(KVState(), ids, B)

        def decode() -> None:
            out, _ = runner.generate(state["s"], q, n_new, [], pad, min_new_tokens=n_new)
            if len(out) != n_new:
                raise RuntimeError(f"{name}: decoded {len(out)} tokens, {n_new} asked")

        t_in = _time(ingest, repeats, warmup=0)
        t_dec = _time(decode, repeats)
        rows.append({"check": "ingest+decode", "method": str(name), "tokens": n_in, "mem_size": M,
                     "ingest_tok_s": rnd(n_in / t_in, 1), "plain_forward_tok_s": rnd(n_in / t_fwd, 1),
                     "ingest_vs_forward": rnd(t_fwd / t_in, 3),
                     "decode_tok_s": rnd(n_new / t_dec, 1), "generate_tok_s": rnd(n_new / t_gen, 1),
                     "decode_vs_generate": rnd(t_gen / t_dec, 3), "status": "ok"})
    return rows


@register("bench", "kv_press")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    checks = [str(c) for c in cfg.checks]
    rows: list[dict[str, Any]] = []
    if "calibration" in checks:
        rows.append(calibration(cfg))
    extra_rows = presses(cfg) if "presses" in checks else []
    return {"description": f"KV presses vs the plain model, model={cfg.model}, ratios measured in one run "
                           f"(medians over {cfg.repeats} repeats).",
            "params": {k: (list(v) if k == "methods" else v) for k, v in cfg.items()},
            "columns": [["check", "check"], ["compared", "compared"], ["lococo_step_s", "LoCoCo step s"],
                        ["lora_step_s", "LoRA LM step s"], ["plain_forward_s", "plain forward s"],
                        ["ratio", "÷ LoRA step"], ["vs_forward", "÷ plain forward"], ["goal", "goal"]],
            "rows": rows,
            "tables": [{"title": "ingest and decode through each press", "columns": [["method", "press"], ["tokens", "tokens"], ["mem_size", "M"],
                                  ["ingest_tok_s", "ingest tok/s"], ["plain_forward_tok_s", "plain forward tok/s"],
                                  ["ingest_vs_forward", "ingest ÷ forward"], ["decode_tok_s", "decode tok/s"],
                                  ["generate_tok_s", "generate (no press) tok/s"],
                                  ["decode_vs_generate", "decode ÷ generate"]],
                        "rows": extra_rows}],
            "notes": ["ingest ÷ forward and decode ÷ generate are speed ratios (1.0 = as fast as the plain model).",
                      "generate without a press decodes from a prefilled cache of M + question tokens, the "
                      "length the presses decode from; the presses' time includes their question segment."]}
