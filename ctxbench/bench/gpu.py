"""``suite=gpu``: bf16 training steps of ICAE, CCM, LoCoCo and LoRA-LM on the 7B shapes, initialised at random.

No weights can be downloaded where this runs, so each model is ``AutoModelForCausalLM.from_config``
on the published shapes of Llama-2-7B and Mistral-7B (:data:`SHAPES`), built directly on the device
in bf16 with the attention implementation of the cell (SDPA; FlashAttention-2 where ``flash_attn``
imports). Each method is then built through the registry on that model exactly as ``ctxbench train``
builds it (its own conf/method YAML, the ``train`` config composed with Hydra), its training
examples come from its own ``train_examples`` on a real text sample, and one fixed batch is stepped
``warmup_steps`` + ``steps`` times: forward under bf16 autocast → backward → clip → AdamW (the
method's own parameter groups) → zero_grad, as train.py's loop.

Per cell it writes:

- ``tokens_per_s``: tokens through the transformer stack per second (every forward of the step:
  ICAE's encoder and decoder, CCM's steps, LoCoCo's segments; counted at the first decoder layer's
  input norm during the forward only, so gradient-checkpointing recomputation is not counted twice);
  ``loss_tokens_per_s``: the tokens the loss covers (``MethodOutput.n_tokens``, as train.py logs);
- ``mfu``: model FLOPs utilisation = 6 · N · tokens_per_s ÷ ``peak_flops``, N = the base model's
  parameters less its input embedding table (a lookup, no FLOPs); the attention-score FLOPs are not
  counted (the usual approximation), and a frozen base still pays the 6 (its activation gradients
  are computed; only its weight gradients are skipped), so MFU of a LoRA run reads low by design;
- ``peak_mem_gb``: ``torch.cuda.max_memory_allocated`` over the steps (model, optimizer state,
  activations); on CPU ``peak_rss_mb`` instead.

``gpu.size=tiny`` runs the same code on a small model of each family on CPU (the check that the
suite works without a GPU); ``gpu.size=7b`` needs a CUDA device and is sized to take under 8
minutes on one H200 (``budget_s`` stops starting cells past it).
"""
from __future__ import annotations

import gc
import importlib.util
import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import MB, PeakMemory, Skip, compose, median, rnd

# Published shapes (config.json of each hub model; meta-llama/Llama-2-7b-hf and mistralai/Mistral-7B-v0.1),
# keyed by the conf/model name whose dtype / attention / gradient checkpointing the cell uses.
SHAPES: dict[str, dict[str, Any]] = {
    "llama2_7b": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "mistral_7b": {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                   "sliding_window": 4096},
}
# gpu.size=tiny: the same families (GQA for Mistral), small enough for a CPU
TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 4096}
TINY_KV_HEADS = {"llama": 4, "mistral": 2}
H200_BF16_DENSE = 989e12  # NVIDIA H200 SXM datasheet: 989 TFLOPS BF16 Tensor Core, dense (1,979 with sparsity)


def model_config(name: str, size: str, attn: str) -> Any:
    """The transformers config of model ``name`` at ``size`` (7b: its published shapes; tiny: small)."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise Skip(f"no published shapes for model {name!r} (gpu.models takes {', '.join(SHAPES)})")
    shape = dict(SHAPES[name])
    if size == "tiny":
        shape.update(TINY, num_key_value_heads=TINY_KV_HEADS[shape["model_type"]])
        shape.pop("sliding_window", None)
    model_type = shape.pop("model_type")
    return AutoConfig.for_model(model_type, attn_implementation=attn, use_cache=False, tie_word_embeddings=False,
                                bos_token_id=1, eos_token_id=2, pad_token_id=0, **shape)


def build_bundle(name: str, size: str, attn: str, device: Any, grad_ckpt: bool, seed: int) -> Any:
    """A random-initialised bf16 model of ``name`` on ``device``, with the byte-level tiny tokenizer.

    The tokenizer's ids (< 300) are valid in every vocabulary here; no method resizes embeddings
    (their added tokens are their own parameters), so the model keeps its published shapes.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from ctxbench.models.loading import ModelBundle, tiny_tokenizer

    conf = model_config(name, size, attn)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise on the device: a 7B random init on the CPU takes minutes
        model = AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16, attn_implementation=attn)
    if grad_ckpt:
        model.gradient_checkpointing_enable()
    return ModelBundle(model=model, tokenizer=tiny_tokenizer(), name=f"{name}-random", path=f"random:{name}")


def flops_params(model: Any) -> int:
    """N of 6·N: the base model's parameters less the input embedding table."""
    emb = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters()) - emb.numel()


class TokenCounter:
    """Counts the tokens entering the first decoder layer while ``on`` (the forward of a step).

    The hook sits on that layer's ``input_layernorm``: HF's layer forward calls it, and so does
    LoCoCo's segment runner, which runs the layers' parts itself.
    """

    def __init__(self, model: Any):
        self.on, self.tokens = False, 0
        norm = model.get_decoder().layers[0].input_layernorm
        self.handle = norm.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, _module: Any, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if self.on and hidden is not None:
            self.tokens += int(hidden.shape[0] * hidden.shape[1])

    def close(self) -> None:
        self.handle.remove()


def cell_overrides(cfg: Any, method_key: str) -> tuple[str, list[str]]:
    spec = (cfg.methods or {})[method_key]
    return str(spec["method"]), [str(o) for o in (spec.get("overrides") or [])]


def measure(cfg: Any, model_name: str, method_key: str, attn: str, device: Any) -> dict[str, Any]:
    """One cell: build model + method as ``ctxbench train`` does, step one batch, time it."""
    import torch
    from accelerate.utils import send_to_device

    from ctxbench.core.registry import build

    size = cfg.size
    method_name, overrides = cell_overrides(cfg, method_key)
    train_cfg = compose("train", [f"method={method_name}", f"model={model_name}",
                                  f"dataset={cfg.dataset}", *overrides])
    knob = cfg.gradient_checkpointing  # auto: the 7B model config's (on); off for tiny
    grad_ckpt = (size != "tiny" and bool(train_cfg.model.get("gradient_checkpointing"))) if knob == "auto" \
        else bool(knob)
    bundle = build_bundle(model_name, size, attn, device, grad_ckpt, cfg.seed)
    method = build("method", train_cfg.method, bundle=bundle).to(device)
    examples = method.train_examples(build("dataset", train_cfg.dataset))
    bs = cfg.batch_size
    if len(examples) < bs:
        raise Skip(f"dataset={train_cfg.dataset.name} gave {len(examples)} training examples, batch_size={bs}")
    batch = send_to_device(method.collate(examples[:bs]), device)
    params = [p for p in method.parameters() if p.requires_grad]
    t = train_cfg.trainer
    lr = float(t.lr)  # the train config's (a method override may set trainer.lr)
    groups = method.optimizer_param_groups(lr, float(t.weight_decay))
    opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(t.betas))
    max_norm = float(t.max_grad_norm or 0.0)
    counter = TokenCounter(bundle.model)
    cuda = device.type == "cuda"
    method.train()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def step() -> tuple[float, int, float, int]:
        counter.tokens = 0
        sync()
        t0 = time.perf_counter()
        counter.on = True
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            out = method(batch)
        counter.on = False
        out.loss.backward()
        if max_norm:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t0, counter.tokens, float(out.loss.detach()), int(out.n_tokens)

    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        with PeakMemory() as mem:
            first = [step() for _ in range(max(1, cfg.warmup_steps))]
            timed = [step() for _ in range(max(1, cfg.steps))]
    finally:
        counter.close()
    step_s = median([s for s, *_ in timed])
    tokens, loss_tokens = timed[-1][1], timed[-1][3]
    n = flops_params(bundle.model)
    peak = float(cfg.peak_flops)
    tok_s = tokens / step_s if step_s else None
    row = {"model": model_name, "method": method_key, "attention": attn, "status": "ok",
           "method_config": method_name, "size": size, "device": str(device), "gradient_checkpointing": grad_ckpt,
           "batch_size": bs, "tokens_per_step": tokens, "loss_tokens_per_step": loss_tokens,
           "step_s": rnd(step_s), "first_step_s": rnd(first[0][0]), "tokens_per_s": rnd(tok_s, 1),
           "loss_tokens_per_s": rnd(loss_tokens / step_s, 1) if step_s else None,
           "flops_params": n, "mfu": float(f"{6 * n * tok_s / peak:.4g}") if tok_s else None,
           "loss": rnd(timed[-1][2]), "finite_loss": all(torch.isfinite(torch.tensor(x[2])).item() for x in first + timed),
           "trainable_params": sum(p.numel() for p in params),
           "trainable_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
           "peak_mem_gb": rnd(torch.cuda.max_memory_allocated(device) / 1024 ** 3, 2) if cuda else None,
           "peak_rss_mb": None if cuda else rnd(mem.peak / MB, 1)}
    del method, bundle, opt, batch, params, groups
    return row


def flash_available() -> str | None:
    """Why FlashAttention-2 cannot run here, or None when ``flash_attn`` imports."""
    if importlib.util.find_spec("flash_attn") is None:
        return "flash_attn is not installed (pip install flash-attn)"
    try:
        import flash_attn  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken build is a reason, not a crash
        return f"flash_attn does not import: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return None


def device_of(cfg: Any) -> Any:
    import torch

    want = cfg.device
    size = cfg.size
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want.startswith("cuda") and not torch.cuda.is_available():
        raise Skip(f"gpu.device={want}: no CUDA device here")
    if size != "tiny" and not want.startswith("cuda"):
        raise Skip("gpu.size=7b needs a CUDA device (7B models at random on a CPU take many minutes per step); "
                   "gpu.size=tiny runs the same steps on CPU")
    return torch.device(want)


def free(device: Any) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@register("bench", "gpu")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    import torch

    device = device_of(cfg)
    models = [str(m) for m in cfg.models or SHAPES]
    methods = [str(m) for m in (cfg.methods or {})]
    attns = [str(a) for a in cfg.attention or ["sdpa"]]
    budget = float(cfg.budget_s)
    no_flash = flash_available() if device.type == "cuda" else "FlashAttention-2 needs a CUDA device"
    t_start, rows = time.perf_counter(), []
    for model_name in models:
        for attn in attns:
            for key in methods:
                base = {"model": model_name, "method": key, "attention": attn}
                if attn == "flash_attention_2" and no_flash:
                    rows.append({**base, "status": "skipped", "reason": no_flash})
                    continue
                if time.perf_counter() - t_start > budget:
                    rows.append({**base, "status": "skipped", "reason": f"past gpu.budget_s={budget:.0f}"})
                    continue
                print(f"bench gpu: {model_name} {attn} {key} ...", flush=True)
                try:
                    rows.append(measure(cfg, model_name, key, attn, device))
                except Skip as e:
                    rows.append({**base, "status": "skipped", "reason": str(e)})
                except Exception as e:  # noqa: BLE001 - one failed cell (an OOM, a method bug) is recorded
                    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                    rows.append({**base, "status": "error", "reason": f"{type(e).__name__}: {first}"})
                free(device)
    peak = float(cfg.peak_flops)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    notes = [f"model weights random (AutoModelForCausalLM.from_config on the published shapes), bf16, size="
             f"{cfg.size}, device={device}{f' ({gpu_name})' if gpu_name else ''}; each method built "
             "through the registry from its conf/method YAML with the listed overrides; one fixed batch, median of "
             f"{cfg.steps} timed steps after {cfg.warmup_steps} warm-up step(s).",
             "tokens/s = tokens through the decoder stack (all forwards of a step); mfu = 6·N·tokens/s ÷ "
             f"peak_flops ({peak:.3g}), N = base parameters less the input embeddings; attention-score FLOPs "
             "not counted.",
             "peak GB = torch.cuda.max_memory_allocated over warm-up and timed steps."]
    return {"description": "bf16 training steps of ICAE, CCM, LoCoCo and LoRA-LM on Llama-2-7B / Mistral-7B shapes "
                           "initialised at random",
            "params": {"size": cfg.size, "device": str(device), "gpu": gpu_name, "models": models,
                       "methods": {k: list(cell_overrides(cfg, k)) for k in methods}, "attention": attns,
                       "peak_flops": peak, "flash_attention": no_flash or "available",
                       "torch": torch.__version__, "cuda": torch.version.cuda},
            "columns": [["model", "model"], ["attention", "attention"], ["method", "method"],
                        ["tokens_per_step", "tokens/step"], ["step_s", "step s"], ["tokens_per_s", "tokens/s"],
                        ["mfu", "MFU"], ["peak_mem_gb", "peak GB"], ["trainable_params", "trainable"]],
            "rows": rows, "notes": notes, "seconds_measuring": rnd(time.perf_counter() - t_start, 1)}
