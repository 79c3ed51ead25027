"""The launcher group: one schema per launcher, each inheriting :class:`LauncherSettings`.

The DeepSpeed mappings are one family: ZeRO-3's optimization settings extend ZeRO-2's (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ctxbench.config.setting import COUNT, REQUIRED, between, configures, nested, registered, setting, tables

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@dataclass
class LauncherSettings:
    """What every launcher's config holds: how accelerate runs the processes."""

    name: str = setting(REQUIRED, 'the registered name this config builds (ctxbench ls lists them)')
    mixed_precision: str | None = setting(None, 'null = follow trainer.precision', choices=('no', 'fp16', 'bf16', 'fp8'))
    find_unused_parameters: bool = setting(True, 'DDP: tolerate parameters that get no gradient in a step')
    deepspeed: str | dict | None = setting(None, 'DeepSpeed config (inline mapping or a JSON file; null = no DeepSpeed)')
    cpu: bool = setting(False, 'force accelerate onto the CPU')


@configures('ddp')
@dataclass
class DdpLauncher(LauncherSettings):
    """Data parallel: `accelerate launch --multi_gpu --num_processes N -m ctxbench train launcher=ddp ...` (on CPU: ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 ...)"""

    name: str = registered('ddp')


@configures('multinode')
@dataclass
class MultinodeLauncher(LauncherSettings):
    """Multi-node data parallel (see scripts/slurm_multinode.sh): every node runs accelerate launch --num_machines $NNODES --machine_rank $RANK --main_process_ip $HEAD --main_process_port 29500 --num_processes $((NNODES*GPUS)) -m ctxbench train launcher=multinode hydra.run.dir=<shared path> ... The run dir must be pinned (a shared filesystem path) so every rank agrees on it."""

    name: str = registered('multinode')


@configures('single')
@dataclass
class SingleLauncher(LauncherSettings):
    """One process (CPU or one GPU). Use `accelerate launch` with another launcher for more."""

    name: str = registered('single')
    find_unused_parameters: bool = setting(True, 'DDP: tolerate parameters that get no gradient in a step (when `accelerate launch` starts several processes)')


@dataclass
class OffloadSettings:
    """launcher.deepspeed.zero_optimization.offload_optimizer (and offload_param)"""

    device: str = setting('none', 'none | cpu: offload this state to RAM', open='a DeepSpeed offload device: none, cpu or nvme')


@dataclass
class ZeroOptimizationSettings:
    """launcher.deepspeed.zero_optimization"""

    stage: int = setting(2, 'ZeRO stage: 2 shards optimizer state and gradients, 3 also parameters', between(0, 3))
    overlap_comm: bool = setting(False, 'overlap gradient reduction with the backward pass')
    contiguous_gradients: bool = setting(True, 'copy gradients into one buffer as they are produced')
    offload_optimizer: OffloadSettings | None = nested(OffloadSettings, 'cpu for CPU offload')


@dataclass
class Zero3OptimizationSettings(ZeroOptimizationSettings):
    """launcher.deepspeed.zero_optimization under ZeRO-3"""

    stage: int = setting(3, 'ZeRO stage: 2 shards optimizer state and gradients, 3 also parameters', between(0, 3))
    stage3_gather_16bit_weights_on_model_save: bool = setting(False, 'gather the full weights when saving (ZeRO-3)')
    offload_param: OffloadSettings | None = nested(OffloadSettings, 'cpu for CPU offload')


@dataclass
class DeepspeedSettings:
    """launcher.deepspeed"""

    zero_optimization: ZeroOptimizationSettings | None = nested(ZeroOptimizationSettings, 'DeepSpeed ZeRO settings')


@dataclass
class Zero3DeepspeedSettings(DeepspeedSettings):
    """launcher.deepspeed under ZeRO-3"""

    zero_optimization: Zero3OptimizationSettings | None = nested(Zero3OptimizationSettings, 'DeepSpeed ZeRO settings')


@configures('deepspeed_zero2')
@dataclass
class DeepspeedZero2Launcher(LauncherSettings):
    """DeepSpeed ZeRO-2 (optimizer state + gradients sharded). Launch: accelerate launch --num_processes N -m ctxbench train launcher=deepspeed_zero2 ... On CPU (tests): ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 -m ctxbench train launcher=deepspeed_zero2"""

    name: str = registered('deepspeed_zero2')
    deepspeed: DeepspeedSettings | None = nested(DeepspeedSettings, 'DeepSpeed config (inline mapping or a JSON file; null = no DeepSpeed)')


@configures('deepspeed_zero3')
@dataclass
class DeepspeedZero3Launcher(LauncherSettings):
    """DeepSpeed ZeRO-3 (parameters sharded too). offload: cpu to move optimizer state and params to RAM."""

    name: str = registered('deepspeed_zero3')
    deepspeed: Zero3DeepspeedSettings | None = nested(Zero3DeepspeedSettings, 'DeepSpeed config (inline mapping or a JSON file; null = no DeepSpeed)')


@dataclass
class FsdpLauncherFsdp:
    """launcher.fsdp"""

    version: int = setting(2, '2 = fully_shard (FSDP2), 1 = FullyShardedDataParallel (use_orig_params)', between(1, 2, note='FSDP1 or FSDP2 (fully_shard)'))
    reshard_after_forward: bool = setting(True, 'FSDP2: true = FULL_SHARD, false = SHARD_GRAD_OP')
    sharding_strategy: str = setting('FULL_SHARD', 'FSDP1: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD', choices=('FULL_SHARD', 'SHARD_GRAD_OP', 'NO_SHARD', 'HYBRID_SHARD'))
    auto_wrap_policy: str = setting('transformer_based_wrap', 'or size_based_wrap, no_wrap', choices=('transformer_based_wrap', 'size_based_wrap', 'no_wrap'))
    transformer_cls_names_to_wrap: list | None = setting(None, "null = the base model's decoder layers (_no_split_modules)")
    min_num_params: int = setting(100000000, 'size_based_wrap only', COUNT)
    state_dict_type: str = setting('SHARDED_STATE_DICT', 'checkpoints: each rank its shards (FULL_STATE_DICT gathers on rank 0)', choices=('SHARDED_STATE_DICT', 'FULL_STATE_DICT'))
    cpu_offload: bool = setting(False, 'offload parameters to the CPU')
    activation_checkpointing: bool = setting(False, 'FSDP activation checkpointing of the wrapped layers')



@configures('fsdp')
@dataclass
class FsdpLauncher(LauncherSettings):
    """PyTorch FSDP through accelerate's FullyShardedDataParallelPlugin (parameters, gradients and optimizer state sharded). Launch on GPUs: accelerate launch --num_processes N -m ctxbench train launcher=fsdp ... Checkpoints: every rank writes its shards (torch.distributed.checkpoint, SHARDED_STATE_DICT) into checkpoints/step_N/accelerate/; trainable.safetensors holds the gathered trainable weights. accelerate 1.15 turns FSDP on only for GPU-like devices (never MULTI_CPU): on CPU this launcher is refused with a message; use deepspeed_zero3 to shard on CPU."""

    name: str = registered('fsdp')
    fsdp: FsdpLauncherFsdp | None = nested(FsdpLauncherFsdp, "accelerate's FullyShardedDataParallelPlugin settings")
