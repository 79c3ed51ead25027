"""The data order: the held-out split and each rank's micro-batches, pure functions of the seed.

Micro-batch ``i`` of a run is always the same examples (the order is a function of (seed, epoch)),
so a resumed run continues exactly where it stopped: its data position is the micro-step count.
"""
from __future__ import annotations

import torch


def split_examples(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    """(training examples, held-out examples): ``fraction`` of them held out (none below 4 examples)."""
    if not fraction or len(examples) < 4:
        return examples, []
    g = torch.Generator().manual_seed(seed + 7919)
    order = torch.randperm(len(examples), generator=g).tolist()
    n_eval = max(1, int(len(examples) * fraction))
    held = set(order[:n_eval])
    return [e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held]


def micro_batch(examples: list, micro: int, batch_size: int, seed: int, rank: int, world: int) -> list:
    """The examples of this rank's ``micro``-th micro-batch: deterministic in (seed, epoch)."""
    per_epoch = max(1, len(examples) // (batch_size * world))
    epoch, idx = divmod(micro, per_epoch)
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    order = torch.randperm(len(examples), generator=g).tolist()
    start = (idx * world + rank) * batch_size
    return [examples[i] for i in order[start : start + batch_size]]
