"""The optimizer (AdamW over the method's parameter groups) and the learning-rate schedule."""
from __future__ import annotations

from typing import Any

import torch

from ctxbench.core.errors import ConfigError

SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}  # ours → transformers


def make_optimizer(method: Any, trainer: Any) -> torch.optim.Optimizer:
    """AdamW over ``method.optimizer_param_groups`` (one group of every trainable parameter, unless
    the method gives its groups their own learning rates) with ``trainer.lr`` / weight decay / betas."""
    lr, weight_decay = float(trainer.lr), float(trainer.weight_decay)
    return torch.optim.AdamW(method.optimizer_param_groups(lr, weight_decay), lr=lr, weight_decay=weight_decay,
                             betas=tuple(trainer.betas))


def warmup_steps(trainer: Any) -> int:
    """``trainer.warmup_steps``, else ``trainer.warmup_ratio`` of ``trainer.max_steps``."""
    if trainer.warmup_steps is not None:
        return int(trainer.warmup_steps)
    return int(round(float(trainer.warmup_ratio) * int(trainer.max_steps)))


def make_scheduler(name: str, optimizer: torch.optim.Optimizer, warmup: int, total: int):
    """``trainer.scheduler`` as a ``transformers.get_scheduler`` LambdaLR: linear warmup, then the named decay.

    The warmup is transformers' (and the HF Trainer's): optimizer step ``s < warmup`` runs at
    ``lr * s / warmup``, so the first step of a warmup runs at lr 0. Past the warmup: cosine to 0,
    linear to 0, or constant at ``lr``, reaching 0 at ``total`` for the first two.
    """
    from transformers import get_scheduler

    if name not in SCHEDULERS:
        raise ConfigError(f"trainer.scheduler={name!r}: use {', '.join(SCHEDULERS)}")
    return get_scheduler(SCHEDULERS[name], optimizer, num_warmup_steps=warmup, num_training_steps=total)
