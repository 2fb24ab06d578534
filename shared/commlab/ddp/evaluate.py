"""Distributed evaluation: each rank scores its slice of the test set, one allgather of
(correct, count, loss sum) makes every rank print the same global accuracy."""
from __future__ import annotations

import struct

import numpy as np
import torch

from commlab.dds import Group
from commlab.models import evaluate

COUNTS = struct.Struct("<qqd")  # correct, samples, summed loss


def distributed_evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, group: Group,
                         key: str, batch_size: int = 1000) -> tuple[float, float]:
    """(global accuracy, global mean loss) over all of x, y."""
    shard = np.array_split(np.arange(len(y)), group.world)[group.rank]
    correct, loss_sum = 0, 0.0
    if shard.size:
        acc, loss = evaluate(model, x[shard], y[shard], batch_size)
        correct, loss_sum = round(acc * shard.size), loss * shard.size
    model.train()
    parts = [COUNTS.unpack(p) for p in group.allgather(key, COUNTS.pack(correct, shard.size, loss_sum))]
    total = sum(n for _, n, _ in parts)
    return sum(c for c, _, _ in parts) / total, sum(s for _, _, s in parts) / total
