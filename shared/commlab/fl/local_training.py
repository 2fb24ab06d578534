"""The client's training step: a seeded subset of its partition, local SGD, the model delta.
Its seeds are the client's for the round (commlab.runs.seeds.SeedTree.local)."""
from __future__ import annotations

import copy

import numpy as np
import torch

from commlab.data import Dataset
from commlab.fl.strategy import FitIns
from commlab.models import flatten_params, load_params, train_epoch
from commlab.models.storage import backs
from commlab.models.train_step import TrainStep, cross_entropy_step
from commlab.runs.seeds import TrainingSeeds


def round_subset(part: np.ndarray, fit: FitIns, seeds: TrainingSeeds) -> np.ndarray:
    """fit.subset_size samples of the client's partition (all of it if smaller), fixed by the
    client's seeds of the round: reruns of a round after a controller restart pick the same samples."""
    if len(part) <= fit.subset_size:
        return part
    return np.sort(np.random.default_rng(seeds.subset).choice(part, size=fit.subset_size, replace=False))


def local_update(model: torch.nn.Module, global_weights: np.ndarray, data: Dataset, indices: np.ndarray,
                 fit: FitIns, seeds: TrainingSeeds, *, momentum: float, weight_decay: float, buffers: bool = True,
                 step: TrainStep = cross_entropy_step, storage: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Train from global_weights for fit.epochs over data[indices], each batch's loss from `step`
    (the client config's train_step); return (new - global, last epoch loss). `buffers`: the
    vectors carry BatchNorm's running statistics after the parameters (config batchnorm: default
    "aggregate"). `storage`: the vector holding the model's tensors (models.storage.share_storage);
    the delta is then made in it, and the model holds the delta until its next load.

    A fresh optimizer every round: momentum is client-local state that must not leak stale
    directions from a model the server has since replaced.
    """
    load_params(model, global_weights, buffers)
    torch.manual_seed(seeds.torch)
    opt = torch.optim.SGD(model.parameters(), lr=fit.lr, momentum=momentum, weight_decay=weight_decay)
    loss = float("nan")
    for epoch in range(fit.epochs):
        loss = train_epoch(model, data.train_x, data.train_y, indices, batch_size=fit.batch_size,
                           lr=fit.lr, seed=seeds.shuffle(epoch), optimizer=opt, step=step)
    if storage is None:
        delta = flatten_params(model, buffers)
    elif backs(storage, model, buffers):
        delta = storage  # where the new weights lie: no vector of the model's size made
    else:
        raise RuntimeError("local_update: the model's tensors are no longer views of its storage vector")
    delta -= global_weights  # in place: one vector of the model's size, not two
    # The gradients (the model's size) would stay resident through the exchange that follows.
    model.zero_grad(set_to_none=True)
    return delta, loss


def warm_up(model: torch.nn.Module, data: Dataset, *, momentum: float, weight_decay: float,
            step: TrainStep = cross_entropy_step) -> None:
    """One step of local training on a copy of `model` (two samples, learning rate 0), dropped:
    the code training runs is loaded while the node is set up, not in its first round. The first
    torch.optim optimizer a process makes imports torch._dynamo, and the first forward and
    backward pass faults in libtorch's kernels: code, the same for any size of the model, which
    would otherwise land in the first exchange phase after training. `model` is not touched."""
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(twin.parameters(), lr=0.0, momentum=momentum, weight_decay=weight_decay)
    train_epoch(twin, data.train_x, data.train_y, np.arange(min(2, len(data.train_y))), batch_size=2, lr=0.0,
                seed=0, optimizer=opt, step=step)
