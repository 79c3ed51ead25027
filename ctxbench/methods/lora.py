"""One peft LoRA wrap for every method (lm, ICAE, LoCoCo): ``method.lora`` → ``get_peft_model``.

peft reads ``model.is_gradient_checkpointing``, which transformers deprecates with a FutureWarning
on every wrap; that warning is about peft's code, not the user's, so it is silenced here only.
It lives beside the methods (not in models/) because it reads ``method.lora``.
"""
from __future__ import annotations

import warnings
from typing import Any


def add_lora(model: Any, lora_cfg: Any) -> Any:
    """``model`` wrapped with a LoRA adapter (base weights frozen) as ``lora_cfg`` (r, alpha, dropout,
    target_modules) says."""
    from peft import LoraConfig, get_peft_model

    conf = LoraConfig(r=int(lora_cfg.r), lora_alpha=int(lora_cfg.alpha),
                      lora_dropout=float(lora_cfg.get("dropout", 0.0)),
                      target_modules=list(lora_cfg.target_modules), bias="none", task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, conf)
