"""Distributed evaluation: the ranks first average their BatchNorm running statistics (each rank
normalised its own batches, so they drift apart; afterwards every rank holds, evaluates with and
checkpoints the same ones), then each scores its slice of the test set, and one allgather of
(correct, targets, loss sum) makes every rank print the same global accuracy."""
from __future__ import annotations

import struct

import numpy as np
import torch

from commlab.dds import Group
from commlab.models import evaluate, flatten_buffers, load_buffers

COUNTS = struct.Struct("<qqd")  # correct, targets, summed loss


def average_buffers(model: torch.nn.Module, group: Group, key: str) -> None:
    """Replace every floating-point buffer by its mean over the ranks (one allreduce; none for a
    model without buffers, which every rank knows alike)."""
    local = flatten_buffers(model)
    if local.size:
        load_buffers(model, group.allreduce(f"{key}/buffers", local, op="mean"))


def distributed_evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, group: Group,
                         key: str, batch_size: int = 1000) -> tuple[float, float]:
    """(global accuracy, global mean loss) over every target of x, y (a sample's class, or each
    position of a language model's sequence)."""
    average_buffers(model, group, key)
    shard = np.array_split(np.arange(len(y)), group.world)[group.rank]
    correct, targets, loss_sum = 0, int(y[shard].size), 0.0
    if shard.size:
        acc, loss = evaluate(model, x[shard], y[shard], batch_size)
        correct, loss_sum = round(acc * targets), loss * targets
    model.train()
    parts = [COUNTS.unpack(p) for p in group.allgather(key, COUNTS.pack(correct, targets, loss_sum))]
    total = sum(n for _, n, _ in parts)
    return sum(c for c, _, _ in parts) / total, sum(s for _, _, s in parts) / total
