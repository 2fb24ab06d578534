"""What every data-parallel trainer builds the same way (the DDS worker, the gloo peer, the
centralized peer), so they compare at equal steps: the dataset, its IID shards, the steps per
epoch and the model, all from the same seed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from commlab.config.builders import build_dataset, build_node_model
from commlab.config.schema import ConfigError, DatasetSection, ModelSection
from commlab.data import Dataset, partition
from commlab.ddp.config import steps_per_epoch


@dataclass
class DataParallelSetup:
    data: Dataset
    shards: list[np.ndarray]
    steps_per_epoch: int
    model: torch.nn.Module


def data_parallel_setup(dataset: DatasetSection, model: ModelSection, world: int, batch_size: int, seed: int,
                        threads: int) -> DataParallelSetup:
    """IID shards of the training set for `world` ranks; ConfigError if a batch exceeds a shard."""
    data = build_dataset(dataset)
    shards = partition(data.train_y, world, "iid", seed=seed)
    steps = steps_per_epoch(len(data.train_y), world, batch_size)
    if steps == 0:
        raise ConfigError(f"training.batch_size: {batch_size} exceeds the smallest shard "
                          f"({min(len(s) for s in shards)} samples for {world} ranks)")
    # Built after the data, from the same seed on every rank: the same initial weights everywhere.
    return DataParallelSetup(data, shards, steps, build_node_model(model, seed=seed, threads=threads, data=data))
