"""Models by name, parameter/gradient vectors, and the plain SGD loop and evaluation every node reuses.

`flatten_params` / `load_params` fix the wire order of a model: `model.parameters()` order, each
tensor flattened row-major, float32. Every codec and collective works on that one vector.
"""
from __future__ import annotations

import hashlib
import os
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from commlab.train_step import TrainStep, batch_loss, cross_entropy_step


class MnistCnn(nn.Module):
    """The CNN of McMahan et al. (FedAvg, 2017): two 5x5 convolutions (32, 64 channels, each with
    2x2 max pooling) and two fully connected layers (3136 -> 512 -> 10); 1,663,370 parameters."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, hidden: int = 512) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


MODELS: dict[str, Callable[..., nn.Module]] = {"mnist_cnn": MnistCnn}


def configure_threads(threads: int | None = None) -> None:
    """Bound torch's thread pools: several training processes share 2 cores, and oversubscribed
    pools make every one of them slower. Default: COMMLAB_TORCH_THREADS, else 1."""
    n = threads if threads is not None else int(os.environ.get("COMMLAB_TORCH_THREADS", "1"))
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # torch allows this only before its first parallel work; already bounded then
        pass


def build_model(name: str, seed: int = 0, **params) -> nn.Module:
    """A fresh model; the same (name, seed, params) gives identical weights in every process."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    configure_threads()
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
        torch.manual_seed(seed)
        return MODELS[name](**params)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def layout_of(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter in flatten_params order: what layout-aware codecs get."""
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def flatten_params(model: nn.Module) -> np.ndarray:
    """All parameters as one new float32 vector (copy: later training does not change it)."""
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()]).numpy().copy()


def _pieces(model: nn.Module, vec: np.ndarray, what: str) -> Iterator[tuple[nn.Parameter, torch.Tensor]]:
    """(parameter, matching slice of vec) pairs, after checking vec has the model's length."""
    vec = np.asarray(vec)
    n = num_params(model)
    if vec.ndim != 1 or vec.size != n:
        raise ValueError(f"{what} vector has shape {vec.shape}, model {type(model).__name__} needs ({n},)")
    flat = torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
    offset = 0
    for p in model.parameters():
        yield p, flat[offset: offset + p.numel()].view_as(p)
        offset += p.numel()


def load_params(model: nn.Module, vec: np.ndarray) -> None:
    """Copy a vector from flatten_params (same architecture) into the model's parameters."""
    pieces = list(_pieces(model, vec, "parameter"))  # validate before touching any weight
    with torch.no_grad():
        for p, piece in pieces:
            p.copy_(piece)


def weights_digest(weights: np.ndarray) -> str:
    """Short content hash of a weight vector, logged so resumes can be checked for bit-identity."""
    return hashlib.sha256(np.ascontiguousarray(weights, dtype=np.float32).tobytes()).hexdigest()[:16]


def flatten_grads(model: nn.Module) -> np.ndarray:
    """All gradients as one float32 vector in flatten_params order; zeros where a grad is None."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float()
                      for p in model.parameters()]).numpy().copy()


def load_grads(model: nn.Module, vec: np.ndarray) -> None:
    """Set every parameter's .grad from a vector (e.g. the allreduced mean) before optimizer.step()."""
    for p, piece in list(_pieces(model, vec, "gradient")):
        p.grad = piece.clone()


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 1000) -> tuple[float, float]:
    """(accuracy, mean cross-entropy loss) over all of x, y."""
    if len(y) == 0:
        raise ValueError("evaluate got no samples")
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            xb = torch.from_numpy(x[start: start + batch_size])
            yb = torch.from_numpy(y[start: start + batch_size])
            out = model(xb)
            loss += F.cross_entropy(out, yb, reduction="sum").item()
            correct += int((out.argmax(1) == yb).sum())
    return correct / len(y), loss / len(y)


def train_epoch(model: nn.Module, x: np.ndarray, y: np.ndarray, indices: np.ndarray, *, batch_size: int,
                lr: float, seed: int, optimizer: torch.optim.Optimizer | None = None,
                step: TrainStep = cross_entropy_step) -> float:
    """One pass of minibatch SGD over x[indices] in an order fixed by seed; returns the mean loss.
    Pass an optimizer to keep its state (momentum) across epochs; default is plain SGD(lr).
    `step` gives each batch's loss (commlab.train_step); default: cross-entropy."""
    if len(indices) == 0:
        raise ValueError("train_epoch got no samples")
    opt = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    order = np.random.default_rng(seed).permutation(np.asarray(indices))
    model.train()
    total = 0.0
    for start in range(0, len(order), batch_size):
        batch = order[start: start + batch_size]
        opt.zero_grad()
        loss = batch_loss(step, model, torch.from_numpy(x[batch]), torch.from_numpy(y[batch]))
        loss.backward()
        opt.step()
        total += loss.item() * len(batch)
    return total / len(order)
