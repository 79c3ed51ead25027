"""One peft LoRA wrap for every method (lm, ICAE, LoCoCo): ``method.lora`` → ``get_peft_model``.

The LoRA weights are float32 whatever the base dtype (peft's ``autocast_adapter_dtype``, passed
explicitly: fp32 master weights under a bf16 base); peft casts a layer's input to them.

peft reads ``model.is_gradient_checkpointing``, which transformers deprecates with a FutureWarning
on every wrap; that warning is about peft's code, not the user's, so it is silenced here only.
It lives beside the methods (not in models/) because it reads ``method.lora``.

:func:`checkpoint_with_adapter_state`: gradient checkpointing for a model whose adapters are
switched off for part of a forward (ICAE's decoder runs inside ``disable_adapter()``). The
recompute of a checkpointed layer runs during backward, long after that context has exited, so it
would rebuild the layer with LoRA on; the checkpoint function installed here captures the adapter
state of each checkpointed call and restores it around that call's recompute.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any, Iterator


def add_lora(model: Any, lora_cfg: Any) -> Any:
    """``model`` wrapped with a LoRA adapter (base weights frozen) as ``lora_cfg`` (r, alpha, dropout,
    target_modules) says."""
    from peft import LoraConfig, get_peft_model

    conf = LoraConfig(r=int(lora_cfg.r), lora_alpha=int(lora_cfg.alpha),
                      lora_dropout=float(lora_cfg.dropout),
                      target_modules=list(lora_cfg.target_modules), bias="none", task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, conf, autocast_adapter_dtype=True)


def tuner_layers(model: Any) -> list[Any]:
    """Every peft tuner (LoRA) layer of ``model``, for :func:`adapters_off`."""
    return _tuner_layers(model)


@contextlib.contextmanager
def adapters_off(model: Any, layers: list[Any]) -> Iterator[None]:
    """``model``'s adapters off for the block, as ``model.disable_adapter()`` (``layers`` = tuner_layers(model))."""
    if any(getattr(m, "merged", False) for m in layers):
        with model.disable_adapter():
            yield
        return
    with _adapters_as(layers, [True] * len(layers)):
        yield


def _tuner_layers(model: Any) -> list[Any]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if layers and not all(hasattr(m, "_disable_adapters") for m in layers):  # peft keeps the flag there
        raise RuntimeError("this peft version keeps no _disable_adapters flag on its layers; "
                           "checkpoint_with_adapter_state cannot capture the adapter state")
    return layers


@contextlib.contextmanager
def _adapters_as(layers: list[Any], disabled: list[bool]) -> Iterator[None]:
    """The flag peft's LoRA forward reads, set as captured (not ``enable_adapters``: that would
    also flip ``requires_grad`` in the middle of a backward)."""
    before = [m._disable_adapters for m in layers]
    try:
        for m, d in zip(layers, disabled):
            m._disable_adapters = d
        yield
    finally:
        for m, d in zip(layers, before):
            m._disable_adapters = d


def checkpoint_with_adapter_state(model: Any) -> None:
    """Make every checkpointing decoder layer of ``model`` recompute under the adapter state its
    forward ran with (non-reentrant ``torch.utils.checkpoint`` with a ``context_fn``). Idempotent;
    layers not checkpointing are left alone."""
    from torch.utils.checkpoint import checkpoint

    candidates = getattr(model, "_ctxbench_checkpointing_modules", None)
    if candidates is None:  # the modules transformers can switch to checkpointing, found once (a hot path)
        candidates = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
        model._ctxbench_checkpointing_modules = candidates
    todo = [m for m in candidates if getattr(m, "gradient_checkpointing", False) is True
            and not getattr(getattr(m, "_gradient_checkpointing_func", None), "adapter_state", False)]
    if not todo:
        return
    layers = _tuner_layers(model)

    def context_fn() -> tuple[Any, Any]:  # called at each checkpointed forward
        return contextlib.nullcontext(), _adapters_as(layers, [m._disable_adapters for m in layers])

    for m in todo:
        func = getattr(m, "_gradient_checkpointing_func", None) or checkpoint
        # on top of the function transformers set (its offload option stays), forced non-reentrant:
        # context_fn exists only there
        func = functools.partial(func, use_reentrant=False, context_fn=context_fn)
        func.adapter_state = True  # type: ignore[attr-defined]
        m._gradient_checkpointing_func = func
