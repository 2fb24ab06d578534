"""Models by name, parameter/gradient vectors, and the plain SGD loop and evaluation every node reuses.

`flatten_params` / `load_params` fix the wire order of a model: `model.parameters()` order, each
tensor flattened row-major, float32; with `buffers=True` the floating-point buffers (BatchNorm's
running statistics) follow in `model.buffers()` order. Every codec and collective works on that one
vector. The architectures live in cnn.py, resnet.py and lstm.py; `MODELS` names them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterator

import blake3
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from commlab.models.cnn import MnistCnn, femnist_cnn
from commlab.models.lstm import CharLstm, LstmLm
from commlab.models.resnet import resnet18, resnet20
from commlab.models.train_step import TrainStep, batch_loss, cross_entropy_step, flat_targets


@dataclass(frozen=True)
class ModelEntry:
    build: Callable[..., nn.Module]
    inputs: str  # "image": float (channels, height, width); "tokens": int64 ids


MODELS: dict[str, ModelEntry] = {
    "mnist_cnn": ModelEntry(MnistCnn, "image"),
    "femnist_cnn": ModelEntry(femnist_cnn, "image"),
    "resnet20": ModelEntry(resnet20, "image"),
    "resnet18": ModelEntry(resnet18, "image"),
    "char_lstm": ModelEntry(CharLstm, "tokens"),
    "lstm_lm": ModelEntry(LstmLm, "tokens"),
}


def model_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


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
    entry = model_entry(name)
    configure_threads()
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
        torch.manual_seed(seed)
        return entry.build(**params)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def float_buffers(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The floating-point buffers (BatchNorm's running means and variances) in model.buffers()
    order. Integer counters (num_batches_tracked) are left out: BatchNorm reads them only with
    momentum=None, and every replica counts the same steps anyway."""
    return [(name, b) for name, b in model.named_buffers() if b.is_floating_point()]


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _tensors(model: nn.Module, buffers: bool) -> list[tuple[str, torch.Tensor]]:
    return list(model.named_parameters()) + (float_buffers(model) if buffers else [])


def layout_of(model: nn.Module, buffers: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor in flatten_params order: what layout-aware codecs get."""
    return [(name, tuple(t.shape)) for name, t in _tensors(model, buffers)]


def _flatten(tensors: list[tuple[str, torch.Tensor]]) -> np.ndarray:
    with torch.no_grad():
        flat = [t.detach().reshape(-1).float() for _, t in tensors]
        # cat made a new tensor: the array is its own (no second copy of the model)
        return torch.cat(flat).numpy() if flat else np.zeros(0, np.float32)


def _pieces(model: nn.Module, tensors: list[tuple[str, torch.Tensor]], vec: np.ndarray,
            what: str) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, tensor, matching slice of vec) triples, after checking vec has their total length."""
    vec = np.asarray(vec)
    n = sum(t.numel() for _, t in tensors)
    if vec.ndim != 1 or vec.size != n:
        raise ValueError(f"{what} vector has shape {vec.shape}, model {type(model).__name__} needs ({n},)")
    flat = torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
    offset = 0
    for name, t in tensors:
        yield name, t, flat[offset: offset + t.numel()].view_as(t)
        offset += t.numel()


def _load(model: nn.Module, tensors: list[tuple[str, torch.Tensor]], vec: np.ndarray, what: str) -> None:
    pieces = list(_pieces(model, tensors, vec, what))  # validate before touching any weight
    with torch.no_grad():
        for name, t, piece in pieces:
            # A lossy codec can push an averaged variance below zero; BatchNorm needs it >= 0.
            t.copy_(piece.clamp(min=0) if name.rpartition(".")[2] == "running_var" else piece)


def flatten_params(model: nn.Module, buffers: bool = False) -> np.ndarray:
    """All parameters as one new float32 vector (copy: later training does not change it); with
    `buffers`, the floating-point buffers follow (FL's batchnorm "aggregate": the model's whole state)."""
    return _flatten(_tensors(model, buffers))


def load_params(model: nn.Module, vec: np.ndarray, buffers: bool = False) -> None:
    """Copy a vector from flatten_params (same architecture, same `buffers`) into the model."""
    _load(model, _tensors(model, buffers), vec, "parameter")


def flatten_buffers(model: nn.Module) -> np.ndarray:
    """The floating-point buffers alone (DDP averages them over the ranks before evaluating)."""
    return _flatten(float_buffers(model))


def load_buffers(model: nn.Module, vec: np.ndarray) -> None:
    _load(model, float_buffers(model), vec, "buffer")


def recompute_batchnorm(model: nn.Module, x: np.ndarray, batch_size: int) -> None:
    """BatchNorm running statistics recomputed as the plain average over x (train-mode forward
    passes, no gradients, weights untouched): FL's batchnorm "local" evaluates the global model so."""
    from torch.optim.swa_utils import update_bn
    update_bn((torch.from_numpy(x[s: s + batch_size]) for s in range(0, len(x), batch_size)), model)


def weights_digest(weights: np.ndarray) -> str:
    """Short content hash of a weight vector (BLAKE3, 64 bits), logged so resumes can be checked for
    bit-identity; every broadcast model is hashed by its sender and again by each receiver, so it is
    on the FL round's path, where BLAKE3's vectorised tree hash is much quicker than SHA-256."""
    # Hashed where it lies (no copy of the model): float32 and contiguous, as every caller holds it.
    return blake3.blake3(memoryview(np.ascontiguousarray(weights, dtype=np.float32)).cast("B")).hexdigest()[:16]


def flatten_grads(model: nn.Module) -> np.ndarray:
    """All gradients as one float32 vector in flatten_params order; zeros where a grad is None."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float()
                      for p in model.parameters()]).numpy()  # cat made a new tensor: the array is its own


def load_grads(model: nn.Module, vec: np.ndarray, share: bool = False) -> None:
    """Set every parameter's .grad from a vector (e.g. the allreduced mean) before optimizer.step().
    `share`: each .grad is a view of `vec`, not a copy, for a vector nothing writes to again (a
    collective's fresh result); that saves allocating and filling the model's size every step."""
    for _, p, piece in list(_pieces(model, _tensors(model, False), vec, "gradient")):
        p.grad = piece if share else piece.clone()


def largest_output_bytes(model: nn.Module, sample: np.ndarray) -> int:
    """The largest tensor any module of `model` outputs for one input sample, in bytes (an eval-mode
    forward pass without gradients): what each sample of a batch adds to an evaluation's peak, a
    few such outputs being alive at once."""
    largest = 0

    def note(_module: nn.Module, _inputs: object, out: object) -> None:
        nonlocal largest
        for t in out if isinstance(out, tuple) else (out,):
            if isinstance(t, torch.Tensor):
                largest = max(largest, t.numel() * t.element_size())

    handles = [m.register_forward_hook(note) for m in model.modules()]
    try:
        model.eval()
        with torch.no_grad():
            model(torch.from_numpy(sample[None]))
    finally:
        for h in handles:
            h.remove()
    return largest


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 1000) -> tuple[float, float]:
    """(accuracy, mean cross-entropy loss) over every target in y: one a sample, or one a
    position for a language model (y of shape (samples, steps))."""
    if len(y) == 0:
        raise ValueError("evaluate got no samples")
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            logits, targets = flat_targets(model(torch.from_numpy(x[start: start + batch_size])),
                                           torch.from_numpy(y[start: start + batch_size]))
            loss += F.cross_entropy(logits, targets, reduction="sum").item()
            correct += int((logits.argmax(1) == targets).sum())
    return correct / y.size, loss / y.size


def train_epoch(model: nn.Module, x: np.ndarray, y: np.ndarray, indices: np.ndarray, *, batch_size: int,
                lr: float, seed: int, optimizer: torch.optim.Optimizer | None = None,
                step: TrainStep = cross_entropy_step) -> float:
    """One pass of minibatch SGD over x[indices] in an order fixed by seed; returns the mean loss.
    Pass an optimizer to keep its state (momentum) across epochs; default is plain SGD(lr).
    `step` gives each batch's loss (commlab.models.train_step); default: cross-entropy."""
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
