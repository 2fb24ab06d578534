"""The FL server's own update for FLTrust (commlab.fl.strategy.FLTrust): local training like a
client's, from the global weights, on a small root set of training samples the server holds.

The trust assumption lives here: the root set is taken as clean and drawn like the clients' data
(here: `samples` training samples drawn uniformly with the run's root-set seed, commlab.runs.seeds).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from commlab.config.builders import build_dataset, build_node_model
from commlab.config.schema import DatasetSection, ModelSection
from commlab.data import Dataset
from commlab.fl.local_training import local_update
from commlab.fl.strategy import FitIns
from commlab.config.train_step_spec import load_train_step
from commlab.models.train_step import TrainStep
from commlab.runs.seeds import SeedTree


class RootUpdate:
    """Callable (weights, FitIns) -> the server's delta. The model and the root set are built on
    the first call, in the controller process, so configs stay cheap to build and check."""

    def __init__(self, model: ModelSection, dataset: DatasetSection, *, samples: int, seeds: SeedTree,
                 momentum: float, train_step: str, threads: int, buffers: bool = True):
        self.model_section, self.dataset_section = model, dataset
        self.samples, self.seeds, self.momentum, self.buffers = samples, seeds, momentum, buffers
        self.train_step, self.threads = train_step, threads
        self.loaded: tuple[torch.nn.Module, Dataset, TrainStep] | None = None

    def load(self) -> tuple[torch.nn.Module, Dataset, TrainStep]:
        data = build_dataset(self.dataset_section, self.seeds.subset)
        rng = np.random.default_rng(self.seeds.root_set)
        rows = np.sort(rng.choice(len(data.train_y), size=min(self.samples, len(data.train_y)), replace=False))
        # Only the root rows are kept: the server holds nothing else of the training data.
        root = replace(data, train_x=data.train_x[rows], train_y=data.train_y[rows],
                       test_x=data.test_x[:0], test_y=data.test_y[:0])
        model = build_node_model(self.model_section, self.seeds.model_init, self.threads, data)
        return model, root, load_train_step(self.train_step)

    def __call__(self, weights: np.ndarray, fit: FitIns) -> np.ndarray:
        if self.loaded is None:
            self.loaded = self.load()
        model, root, step = self.loaded
        # As many samples per epoch as a client trains on (the root set repeated): the reference's
        # norm, to which every client delta is rescaled, is then that of a client's update.
        indices = np.resize(np.arange(len(root.train_y)), max(fit.subset_size, len(root.train_y)))
        delta, _ = local_update(model, weights, root, indices, fit, self.seeds.server_training(fit.round),
                                momentum=self.momentum, weight_decay=0.0,
                                buffers=self.buffers, step=step)
        return delta
