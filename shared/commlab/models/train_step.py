"""The local training step, chosen by config (`train_step`, commlab.config.train_step_spec): a
function

    step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor

that returns the scalar (0-dim) loss of one batch, with the graph attached. It only computes the
loss: the caller does zero_grad, backward, the gradient exchange or update compression, and the
optimizer step, so compression, communication and the optimizer stay the testbed's. The default,
`commlab.models.train_step:cross_entropy_step`, is the plain cross-entropy; x is a float image batch or
int64 token ids, y one class a sample or (language models) one token a position.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

TrainStep = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def flat_targets(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets, classes) logits and the matching target vector: a classifier's (batch, classes)
    with y (batch,) as they are; a language model's (batch, steps, vocabulary) with y (batch, steps)
    as one target a position."""
    return logits.reshape(-1, logits.shape[-1]), y.reshape(-1)


def cross_entropy_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The default step: mean cross-entropy of the model's logits, over samples (classifiers:
    images or token ids in) or over every position (language models)."""
    return F.cross_entropy(*flat_targets(model(x), y))


def batch_loss(step: TrainStep, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """step(model, x, y), checked to be the scalar loss tensor the caller can call backward() on."""
    loss = step(model, x, y)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        what = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise TypeError(f"train step {getattr(step, '__qualname__', step)!r} returned {what}, "
                        "expected the scalar loss tensor of the batch")
    return loss
