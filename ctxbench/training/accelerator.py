"""The Accelerator a run trains under: precision, DDP / DeepSpeed / FSDP plugins, the tracker (wandb).

Also the two places where building the model must know how the run is sharded: a method built on a
ZeRO-3-partitioned base (:func:`gathered`) and FSDP's wrap classes (:func:`fsdp_wrap_classes`).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ctxbench.core.errors import ConfigError, MissingDependency


def distributed_kind(acc: Any) -> str:
    """``DEEPSPEED`` / ``FSDP`` / ``MULTI_CPU`` / ``NO`` ...: how the run is distributed."""
    return str(acc.distributed_type).rsplit(".", 1)[-1]


def tracker_of(cfg: DictConfig) -> str | None:
    """The accelerate tracker ``logger=`` asks for: "wandb", or None (``logger=none``: no tracker at all)."""
    logger = cfg.get("logger")  # a group a config may leave out (~logger, a training config built by hand)
    if logger is None or logger.get("name") != "wandb":
        return None
    from accelerate.utils import is_wandb_available

    if not is_wandb_available():  # accelerate would drop the tracker without a word
        raise MissingDependency("logger=wandb needs the wandb package: pip install wandb (or use logger=none)")
    return "wandb"


def make_accelerator(cfg: DictConfig, project_dir: Path | None = None):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    t, launcher = cfg.trainer, cfg.launcher
    precision = launcher.mixed_precision or {"bf16": "bf16", "fp16": "fp16"}.get(t.precision, "no")
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=bool(launcher.find_unused_parameters))]
    if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        handlers.append(InitProcessGroupKwargs(backend="gloo"))
    kwargs: dict[str, Any] = {}
    if launcher.deepspeed:
        from accelerate.utils import DeepSpeedPlugin

        os.environ.setdefault("ACCELERATE_USE_DEEPSPEED", "true")  # what `accelerate launch --use_deepspeed` sets
        ds = OmegaConf.to_container(launcher.deepspeed, resolve=True)
        ds.setdefault("train_micro_batch_size_per_gpu", int(t.batch_size))
        ds.setdefault("gradient_accumulation_steps", int(t.grad_accum))
        ds.setdefault("gradient_clipping", float(t.max_grad_norm or 0.0))
        ds.setdefault("zero_force_ds_cpu_optimizer", False)
        kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=ds)
    if launcher.get("fsdp"):  # only launcher=fsdp's schema has it
        kwargs["fsdp_plugin"] = fsdp_plugin(launcher.fsdp)
    acc = Accelerator(gradient_accumulation_steps=int(t.grad_accum), mixed_precision=precision,
                      cpu=bool(launcher.cpu), kwargs_handlers=handlers, log_with=tracker_of(cfg),
                      project_dir=str(project_dir) if project_dir is not None else None, **kwargs)
    if launcher.get("fsdp") and distributed_kind(acc) != "FSDP":
        # accelerate (1.15, state.py) turns FSDP on only from MULTI_GPU/NPU/XPU/HPU/MLU/...: never from
        # MULTI_CPU, nor from one process without `accelerate launch`; it would train as plain DDP instead.
        raise ConfigError(f"launcher=fsdp: accelerate enabled no FSDP for this run (it is {acc.distributed_type} "
                          f"x{acc.num_processes}); FSDP needs `accelerate launch` on GPUs (accelerate enables it on no "
                          f"CPU run): on CPU use launcher=deepspeed_zero3 (sharded) or launcher=ddp")
    return acc


FSDP_DEFAULTS: dict[str, Any] = {
    "version": 2, "reshard_after_forward": True, "sharding_strategy": "FULL_SHARD",
    "auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": None, "min_num_params": 100_000_000,
    "state_dict_type": "SHARDED_STATE_DICT", "cpu_offload": False, "activation_checkpointing": False,
}


def fsdp_plugin(conf: Any):
    """accelerate's FullyShardedDataParallelPlugin from ``launcher.fsdp`` (see conf/launcher/fsdp.yaml)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    f = {**FSDP_DEFAULTS, **OmegaConf.to_container(conf, resolve=True)}
    args: dict[str, Any] = {
        "fsdp_version": int(f["version"]), "auto_wrap_policy": str(f["auto_wrap_policy"]),
        "min_num_params": int(f["min_num_params"]), "state_dict_type": str(f["state_dict_type"]),
        "cpu_offload": bool(f["cpu_offload"]), "activation_checkpointing": bool(f["activation_checkpointing"]),
    }
    if f["transformer_cls_names_to_wrap"]:
        args["transformer_cls_names_to_wrap"] = list(f["transformer_cls_names_to_wrap"])
    if args["fsdp_version"] == 2:
        args["reshard_after_forward"] = bool(f["reshard_after_forward"])
    else:  # FSDP1: orig params, or the frozen base and the trainables could not share a flat parameter
        args.update(sharding_strategy=str(f["sharding_strategy"]), use_orig_params=True)  # accelerate: "deprecated"
    return FullyShardedDataParallelPlugin(**args)


def fsdp_wrap_classes(acc: Any, base_model: Any) -> None:
    """FSDP's transformer-based wrap: the base model's decoder layer classes (``_no_split_modules``)
    when ``launcher.fsdp.transformer_cls_names_to_wrap`` names none (accelerate would look for them
    on the method, which has none, and shard only the root)."""
    plugin = getattr(acc.state, "fsdp_plugin", None)
    if distributed_kind(acc) != "FSDP" or plugin is None or plugin.transformer_cls_names_to_wrap:
        return
    plugin.transformer_cls_names_to_wrap = list(getattr(base_model, "_no_split_modules", None) or [])


def gathered(params: Any, modify: bool = False):
    """The parameters whole where ZeRO-3 partitioned them (a no-op for ordinary ones).

    Under ZeRO-3 transformers loads the base model already partitioned (``zero.Init``), so a
    method built on it would see empty shards where it reads the token embeddings (ICAE's and
    CCM's initial embeddings come from their statistics). A collective: every rank enters it.
    ``modify=True`` keeps what rank 0 wrote into them (loading ``checkpoint=DIR``), else it is dropped.
    """
    parts = [p for p in params if hasattr(p, "ds_id")]
    if not parts:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(parts, modifier_rank=0 if modify else None)
