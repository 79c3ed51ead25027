"""Sharded training state (DeepSpeed ZeRO, FSDP): every rank's shards saved through accelerate.

Under DeepSpeed (any ZeRO stage) and FSDP the optimizer state, and under ZeRO-3 / FSDP the
parameters too, are split between the ranks: no single process holds them, so rank 0 cannot
write ``optimizer.pt`` for everyone. Every rank then writes its own shards with
``accelerator.save_state`` into ``<step_N.tmp>/accelerate/`` (DeepSpeed: the engine's
``save_checkpoint``, frozen base weights excluded; FSDP: ``torch.distributed.checkpoint`` files of
``state_dict_type=SHARDED_STATE_DICT``), before rank 0 writes the MANIFEST over all of them and
renames the folder (checkpoint.py). ``accelerator.load_state`` reads them back on resume.

Trust boundary: DeepSpeed reads its files with ``torch.load(weights_only=False)`` and torch's
distributed checkpoint reads its ``.metadata`` with ``pickle``; neither can be made safe from
here. The checkpoint's MANIFEST (size + sha256 of every shard) is verified before they load, so a
damaged or swapped-in file is refused, but a MANIFEST rewritten by someone who can write the run
folder is not: resume only sharded checkpoints of run folders you trust. The exported
``trainable.safetensors`` (what ``checkpoint=DIR`` and ``eval`` read) stays safe to load from anywhere.

Single-process and DDP runs keep ``optimizer.pt`` (``weights_only=True``): DDP replicates the
optimizer state on every rank, so rank 0's copy is everyone's.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

ACCELERATE_DIR = "accelerate"  # inside a checkpoint folder: accelerate's save_state of every rank
SHARDED_TYPES = ("DEEPSPEED", "FSDP")


def kind(acc: Any) -> str:
    """``DEEPSPEED`` / ``FSDP`` / ``MULTI_CPU`` / ``NO`` ...: how the run is distributed."""
    return str(acc.distributed_type).rsplit(".", 1)[-1]


def is_sharded(acc: Any) -> bool:
    """Whether this run's optimizer (and maybe parameter) state is split between ranks."""
    return kind(acc) in SHARDED_TYPES


def layout(acc: Any) -> dict[str, Any]:
    """What state.json records about how the state was saved (checked on resume)."""
    return {"format": "accelerate" if is_sharded(acc) else "torch", "distributed_type": kind(acc),
            "processes": int(acc.num_processes)}


def _engine_kwargs(acc: Any, save: bool) -> dict[str, Any]:
    """DeepSpeed: leave the frozen base weights out (they are rebuilt from the model config)."""
    if kind(acc) != "DEEPSPEED":
        return {}
    return {"exclude_frozen_parameters": True} if save else {"load_module_strict": False}


def save(acc: Any, tmp: Path) -> None:
    """Every rank: its shards into ``tmp/accelerate`` (a collective: all ranks call it)."""
    acc.save_state(str(Path(tmp) / ACCELERATE_DIR), **_engine_kwargs(acc, save=True))


def load(acc: Any, ckpt: Path) -> None:
    """Every rank: its shards from ``ckpt/accelerate`` (verify the MANIFEST first: see the module doc)."""
    from ctxbench.training.checkpoint import CheckpointError
    from ctxbench.data.errors import first_line

    folder = Path(ckpt) / ACCELERATE_DIR
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint {ckpt}: folder {ACCELERATE_DIR}/ is missing (the sharded state of "
                              f"launcher with {kind(acc)})")
    try:
        acc.load_state(str(folder), **_engine_kwargs(acc, save=False))
    except Exception as e:  # DeepSpeed / torch.distributed.checkpoint raise their own types
        raise CheckpointError(f"checkpoint {ckpt}: cannot load {ACCELERATE_DIR}/: "
                              f"{type(e).__name__}: {first_line(e, repr(e))[:300]}") from None


def check_layout(ckpt: Path, state: dict[str, Any], acc: Any) -> None:
    """A one-line CheckpointError when the checkpoint's state was saved in another layout than this run's."""
    from ctxbench.training.checkpoint import CheckpointError

    saved = state.get("layout") or {"format": "torch", "distributed_type": "?", "processes": "?"}
    sharded_ckpt = (Path(ckpt) / ACCELERATE_DIR).is_dir()
    hint = f"or start a new run from its trained weights with checkpoint={ckpt}"
    if sharded_ckpt and not is_sharded(acc):
        raise CheckpointError(f"checkpoint {ckpt} holds the sharded state of {saved.get('processes')} processes "
                              f"under {saved.get('distributed_type')}; this run is {kind(acc)}: resume it with "
                              f"that launcher, {hint}")
    if is_sharded(acc) and not sharded_ckpt:
        raise CheckpointError(f"checkpoint {ckpt} was saved without sharded state (optimizer.pt of "
                              f"{saved.get('distributed_type')}); this run is {kind(acc)}: resume it with that "
                              f"launcher, {hint}")
    if sharded_ckpt and (saved.get("distributed_type") != kind(acc) or saved.get("processes") != acc.num_processes):
        raise CheckpointError(f"checkpoint {ckpt} holds the sharded state of {saved.get('processes')} processes "
                              f"under {saved.get('distributed_type')}; this run is {acc.num_processes} under "
                              f"{kind(acc)}: resume with the same launcher and --num_processes, {hint}")


def full_trainable(acc: Any, model: Any) -> dict[str, torch.Tensor]:
    """The method's whole trainable weights (its ``trainable_state_dict()``) on every rank.

    A collective under ZeRO-3 and FSDP (every rank must call it, in the same order): their
    parameters are shards on each rank (ZeRO-3: empty placeholders; FSDP2: DTensors; FSDP1:
    slices of a flat parameter), gathered here for the trainable ones only — never the base model.
    """
    method = acc.unwrap_model(model)
    with _gathered(acc, model, method):
        state = method.trainable_state_dict()
    state = {k: _full(v).detach().cpu().clone() for k, v in state.items()}
    if kind(acc) == "DEEPSPEED":
        state.update(_fp32_masters(method, state))
    return state


def _fp32_masters(method: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DeepSpeed's fp32 copies of the trained weights (under bf16 / fp16 the module holds a rounded
    copy; the optimizer the fp32 one), where it has them. A collective: every rank, same order."""
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, p in method.named_parameters():
        if name in state and p.requires_grad:
            hp = safe_get_full_fp32_param(p)
            if hp is not None:
                out[name] = hp.detach().cpu().reshape(state[name].shape).clone()
    return out


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _gathered(acc: Any, model: Any, method: Any):
    """A context in which the trainable parameters are whole (a no-op where they already are)."""
    if kind(acc) == "DEEPSPEED" and _zero_stage(acc) == 3:
        import deepspeed

        trainable = [p for p in method.parameters() if p.requires_grad]
        return deepspeed.zero.GatheredParameters(trainable, modifier_rank=None)
    if kind(acc) == "FSDP" and getattr(acc.state.fsdp_plugin, "fsdp_version", 1) == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        return FSDP.summon_full_params(model, writeback=False, rank0_only=False)
    return contextlib.nullcontext()


def _zero_stage(acc: Any) -> int:
    plugin = acc.state.deepspeed_plugin
    return int(plugin.zero_stage) if plugin is not None else 0


def fsdp_wrap_classes(acc: Any, base_model: Any) -> None:
    """FSDP's transformer-based wrap: the base model's decoder layer classes (``_no_split_modules``)
    when ``launcher.fsdp.transformer_cls_names_to_wrap`` names none (accelerate would look for them
    on the method, which has none, and shard only the root)."""
    plugin = getattr(acc.state, "fsdp_plugin", None)
    if kind(acc) != "FSDP" or plugin is None or plugin.transformer_cls_names_to_wrap:
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
