"""Data-parallel BatchNorm: before every evaluation the ranks average their running statistics,
so every rank evaluates with, and checkpoints, the same buffers."""
from __future__ import annotations

import numpy as np
import torch

from commlab.ddp.evaluate import distributed_evaluate
from commlab.models import build_model, flatten_buffers, flatten_params


class TwoRanks:
    """Rank `rank` of a world of two whose peer holds `peer_buffers` and scores nothing."""
    world = 2

    def __init__(self, rank: int, peer_buffers: np.ndarray):
        self.rank, self.peer_buffers, self.keys = rank, peer_buffers, []

    def allreduce(self, key, vec, op="mean"):
        self.keys.append(key)
        return (vec + self.peer_buffers) / 2

    def allgather(self, key, payload):
        from commlab.ddp.evaluate import COUNTS
        return [payload, COUNTS.pack(0, 0, 0.0)] if self.rank == 0 else [COUNTS.pack(0, 0, 0.0), payload]


def test_ranks_evaluate_with_the_mean_of_their_statistics():
    models = [build_model("resnet20", seed=0) for _ in range(2)]
    for rank, model in enumerate(models):  # each rank normalises its own batches
        model(torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(rank)))
    before = [flatten_buffers(m) for m in models]
    assert not np.array_equal(*before)
    x = np.random.default_rng(0).standard_normal((6, 3, 32, 32)).astype(np.float32)
    y = np.arange(6) % 10
    weights = flatten_params(models[0])
    groups = [TwoRanks(0, before[1]), TwoRanks(1, before[0])]
    for model, group in zip(models, groups):
        distributed_evaluate(model, x, y, group, "eval/0")
    assert groups[0].keys == ["eval/0/buffers"]
    after = [flatten_buffers(m) for m in models]
    assert np.allclose(after[0], (before[0] + before[1]) / 2) and np.allclose(after[0], after[1])
    assert np.array_equal(flatten_params(models[0]), weights)  # the weights are the exchange's business


def test_a_model_without_buffers_sends_nothing_more():
    group = TwoRanks(0, np.zeros(0, np.float32))
    distributed_evaluate(build_model("mnist_cnn"), np.zeros((2, 1, 28, 28), np.float32), np.zeros(2, np.int64),
                         group, "eval/0")
    assert group.keys == []
