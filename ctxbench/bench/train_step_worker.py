"""One method's training-step measurement, run in its own process by ``suite=train_step``.

``python -m ctxbench.bench.train_step_worker '<json spec>'`` composes the real ``train`` config
(``method=X model=M dataset=D trainer.batch_size=B`` + overrides), builds the model, the method and
its training examples exactly as ``ctxbench train`` does, takes the first ``batch_size`` examples as
the one batch every step sees, and times ``forward → backward → clip → AdamW step → zero_grad``
(the loop's inner step). It prints one JSON line prefixed ``BENCH_RESULT`` with:

- ``step_s`` (per timed step), ``loss_tokens`` (MethodOutput.n_tokens: tokens the loss covers,
  what train.py logs as tokens_per_s);
- memory as resident set size (RSS) of this process: ``setup_rss`` after model + method + data,
  ``first_step_peak_extra`` = peak RSS during the first step minus RSS before it (activations,
  gradients and the optimizer state it allocates), ``step_peak_extra`` = the same for the later
  steps (optimizer state already there), ``peak_rss`` = the process's peak.

A method that is training-free (its ``train_examples`` refuses) reports ``skipped`` with the reason.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from accelerate.utils import send_to_device

    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build
    from ctxbench.bench.common import MB, PeakMemory, compose, peak_rss, rss
    from ctxbench.training.allocator import set_mmap_threshold

    overrides = [f"method={spec['method']}", f"model={spec['model']}", f"dataset={spec['dataset']}",
                 f"trainer.batch_size={int(spec['batch_size'])}", *spec.get("overrides", [])]
    cfg = compose("train", overrides)
    set_mmap_threshold(cfg.trainer.mmap_threshold_kb)  # as `train` sets it
    torch.manual_seed(int(cfg.seed))
    bundle = load_model(cfg.model)
    method = build("method", cfg.method, bundle=bundle)
    samples = build("dataset", cfg.dataset)
    try:
        examples = method.train_examples(samples)
    except ValueError as e:
        return {"status": "skipped", "reason": str(e).split("\n")[0]}
    if not examples:
        return {"status": "skipped", "reason": f"dataset={spec['dataset']} gave no training examples"}
    params = [p for p in method.parameters() if p.requires_grad]
    if not params:
        return {"status": "skipped", "reason": "no trainable parameters"}
    bs = int(spec["batch_size"])
    batch = send_to_device(method.collate(examples[:bs]), method.device if hasattr(method, "device") else "cpu")
    opt = torch.optim.AdamW(params, lr=float(cfg.trainer.lr))
    max_norm = float(cfg.trainer.max_grad_norm or 0.0)
    method.train()

    def step() -> int:
        out = method(batch)
        out.loss.backward()
        if max_norm:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return int(out.n_tokens)

    setup = rss()
    first: list[float] = []
    with PeakMemory() as m_first:
        for _ in range(max(1, int(spec.get("warmup_steps", 1)))):
            t0 = time.perf_counter()
            n_tok = step()
            first.append(time.perf_counter() - t0)
    times: list[float] = []
    with PeakMemory() as m_steady:
        for _ in range(int(spec.get("steps", 3))):
            t0 = time.perf_counter()
            n_tok = step()
            times.append(time.perf_counter() - t0)
    n_train = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in method.parameters())
    return {"status": "ok", "method": spec["method"], "model": str(cfg.model.name), "dataset": str(cfg.dataset.name),
            "batch_size": bs, "examples_available": len(examples), "loss_tokens": n_tok, "step_s": times,
            "first_step_s": first, "trainable_params": n_train, "total_params": n_total,
            "setup_rss_mb": setup / MB, "first_step_peak_extra_mb": m_first.delta / MB,
            "step_peak_extra_mb": m_steady.delta / MB, "peak_rss_mb": max(peak_rss(), m_first.peak) / MB,
            "peak_reset_exact": bool(m_first.exact), "torch_threads": torch.get_num_threads()}


def measure_reference(spec: dict[str, Any]) -> dict[str, Any]:
    """The method on the reference's settings beside a plain HF LoRA LM step, in one process.

    First the method alone (``warmup_steps`` + ``steps``, its peak RSS: what training it costs), then
    ``steps`` interleaved pairs (method step, yardstick step) for the ratio. The yardstick is the
    method's own peft model with its adapter on, called as HF does (``model(input_ids, labels)``:
    full-vocabulary logits and the model's loss) over ``lm_tokens`` tokens per example, with the
    same optimizer: the step the issue's reference figure (step ÷ LM step = 1.47) was taken against.
    """
    import torch
    from accelerate.utils import send_to_device

    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build
    from ctxbench.bench.common import MB, PeakMemory, compose
    from ctxbench.methods.lean_mlp import plain_mlp
    from ctxbench.training.allocator import set_mmap_threshold

    bs = int(spec["batch_size"])
    cfg = compose("train", [f"method={spec['method']}", f"model={spec['model']}", f"dataset={spec['dataset']}",
                            f"trainer.batch_size={bs}", *spec.get("overrides", [])])
    set_mmap_threshold(cfg.trainer.mmap_threshold_kb)  # as `train` sets it
    torch.manual_seed(int(cfg.seed))
    method = build("method", cfg.method, bundle=load_model(cfg.model))
    examples = method.train_examples(build("dataset", cfg.dataset))
    if len(examples) < bs:
        return {"status": "skipped", "reason": f"dataset={spec['dataset']} gave {len(examples)} examples, batch {bs}"}
    device = method.device
    batch = send_to_device(method.collate(examples[:bs]), device)
    params = [p for p in method.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(cfg.trainer.lr))
    max_norm = float(cfg.trainer.max_grad_norm or 0.0)
    g = torch.Generator().manual_seed(0)
    vocab = method.base.get_output_embeddings().weight.shape[0] if hasattr(method, "base") else 1000
    ids = torch.randint(100, max(101, vocab - 1), (bs, int(spec["lm_tokens"])), generator=g).to(device)
    method.train()

    def finish(loss: Any) -> None:
        loss.backward()
        if max_norm:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def method_step() -> int:
        out = method(batch)
        finish(out.loss)
        return int(out.n_tokens)

    def lm_step() -> None:
        with plain_mlp(method.model):  # HF's own step, as the reference's figure was taken against
            finish(method.model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss)

    with PeakMemory() as m_alone:
        for _ in range(max(1, int(spec.get("warmup_steps", 1)))):
            n_tok = method_step()
        alone = []
        for _ in range(int(spec.get("steps", 3))):
            t0 = time.perf_counter()
            method_step()
            alone.append(time.perf_counter() - t0)
    lm_step()  # the yardstick's warm-up
    pairs: list[tuple[float, float]] = []
    for _ in range(int(spec.get("steps", 3))):
        t0 = time.perf_counter()
        method_step()
        t1 = time.perf_counter()
        lm_step()
        pairs.append((t1 - t0, time.perf_counter() - t1))
    return {"status": "ok", "method": spec["method"], "model": str(cfg.model.name), "batch_size": bs,
            "loss_tokens": n_tok, "lm_tokens": int(spec["lm_tokens"]) * bs, "step_s_alone": alone,
            "method_s": [a for a, _ in pairs], "lm_s": [b for _, b in pairs],
            "peak_rss_mb": m_alone.peak / MB, "peak_reset_exact": bool(m_alone.exact),
            "torch_threads": torch.get_num_threads()}


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    try:
        res = measure_reference(spec) if spec.get("kind") == "reference" else measure(spec)
    except Exception as e:  # noqa: BLE001 - reported to the parent as this method's error
        res = {"status": "error", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    print("BENCH_RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
