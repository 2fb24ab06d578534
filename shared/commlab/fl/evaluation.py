"""The controller's evaluation of each round's global model on the test set.

With batchnorm "local" the model vector holds no BatchNorm statistics: the controller recomputes
them for the global weights from a fixed sample of training samples (the run's evaluation seed,
commlab.runs.seeds) before every evaluation, as FedBN-style training leaves the server none of its own.
"""
from __future__ import annotations

import numpy as np
import torch

from commlab.data import Dataset
from commlab.fl.config import ControllerConfig
from commlab.models import evaluate, has_batchnorm, load_params, recompute_batchnorm


class GlobalEvaluation:
    """Callable weights -> (test accuracy, test loss)."""

    def __init__(self, cfg: ControllerConfig, model: torch.nn.Module, data: Dataset):
        self.model, self.data = model, data
        self.buffers, self.batch_size = cfg.sends_buffers, cfg.eval_batch_size
        self.calibration: np.ndarray | None = None
        if not cfg.sends_buffers and has_batchnorm(model):
            rng = np.random.default_rng(cfg.seeds.tree.evaluation)
            n = min(cfg.bn_calibration_samples, len(data.train_y))
            self.calibration = data.train_x[np.sort(rng.choice(len(data.train_y), size=n, replace=False))]

    def __call__(self, weights: np.ndarray) -> tuple[float, float]:
        load_params(self.model, weights, self.buffers)
        if self.calibration is not None:
            recompute_batchnorm(self.model, self.calibration, self.batch_size)
        return evaluate(self.model, self.data.test_x, self.data.test_y, self.batch_size)
