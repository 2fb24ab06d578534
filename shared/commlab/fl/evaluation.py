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
from commlab.models import evaluate, has_batchnorm, largest_output_bytes, load_params, recompute_batchnorm


# What one sample costs an evaluation pass at its peak, in its largest layer outputs: the outputs
# alive at once (a residual block: its input, the two outputs of its branch and their sum) and a
# 3x3 convolution's unfolded input on torch's CPU path (9 times the layer's input); and the least
# memory an evaluation may use (a small model's evaluation is not slowed to batches of a few samples).
LIVE_OUTPUTS = 4 + 9
FLOOR_BYTES = 16 * 2**20


def bounded_batch(model: torch.nn.Module, data: Dataset, largest: int) -> int:
    """The evaluation batch: `largest` (config eval_batch_size), smaller where its activations
    would exceed the model's own fp32 size, so that evaluating stays within the exchange's memory
    target (commlab.output.memory_watch)."""
    if len(data.test_x) == 0:
        return largest
    per_sample = LIVE_OUTPUTS * largest_output_bytes(model, data.test_x[0])
    budget = max(FLOOR_BYTES, 4 * sum(p.numel() for p in model.parameters()))
    return max(1, min(largest, budget // max(per_sample, 1)))


class GlobalEvaluation:
    """Callable weights -> (test accuracy, test loss)."""

    def __init__(self, cfg: ControllerConfig, model: torch.nn.Module, data: Dataset):
        self.model, self.data = model, data
        self.buffers, self.largest_batch = cfg.sends_buffers, cfg.eval_batch_size
        self.batch_size: int | None = None  # bounded_batch, found on the first call
        self.calibration: np.ndarray | None = None
        if not cfg.sends_buffers and has_batchnorm(model):
            rng = np.random.default_rng(cfg.seeds.tree.evaluation)
            n = min(cfg.bn_calibration_samples, len(data.train_y))
            self.calibration = data.train_x[np.sort(rng.choice(len(data.train_y), size=n, replace=False))]

    def __call__(self, weights: np.ndarray) -> tuple[float, float]:
        load_params(self.model, weights, self.buffers)
        if self.batch_size is None:
            self.batch_size = bounded_batch(self.model, self.data, self.largest_batch)
        if self.calibration is not None:
            recompute_batchnorm(self.model, self.calibration, self.batch_size)
        return evaluate(self.model, self.data.test_x, self.data.test_y, self.batch_size)
