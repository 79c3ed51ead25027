"""Test double: ``python -m ctxbench`` with accelerate's FSDP path opened on CPU (gloo).

accelerate 1.15 sets ``DistributedType.FSDP`` only when the run is MULTI_GPU / NPU / XPU / HPU /
MLU / SDAA / MUSA / NEURON (``AcceleratorState.__init__``, accelerate/state.py); a CPU run
(MULTI_CPU) given an FSDP plugin silently stays DDP, and no environment setting changes that
(``ctxbench.training.accelerator.make_accelerator`` refuses it with a message instead). Torch's FSDP
itself runs on CPU with gloo (FSDP2 ``fully_shard`` on a CPU device mesh), so this shim changes that one gate
and nothing else: the state then says FSDP and everything after it is accelerate's and torch's
real code (``fsdp2_prepare_model``, FSDP gradient clipping, ``save_state`` / ``load_state`` with
torch.distributed.checkpoint shards). Used by tests/test_distributed.py through ``accelerate launch``.

Only FSDP2 (the default, ``launcher.fsdp.version=2``) runs on CPU this way. FSDP1 stops in torch's
``FullyShardedDataParallel.__init__`` (torch 2.13, fsdp/_init_utils.py ``_get_compute_device``) with
``ValueError: Inconsistent compute device and `device_id` on rank 0: cpu vs cpu:0``: accelerate passes
``device_id=accelerator.device`` and FSDP1 compares it with its CPU device handle's current device.
"""
from __future__ import annotations

import sys
from pathlib import Path


def open_cpu_fsdp() -> None:
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    AcceleratorState.__init__ = init


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ctxbench, as `-m ctxbench` has
    open_cpu_fsdp()
    from ctxbench.__main__ import main

    main(sys.argv[1:])
