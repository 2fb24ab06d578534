"""A model whose tensors live in one vector: what an FL client sets up once so that a round's
exchange needs no vector of the model's size beyond those it exchanges.

share_storage: every tensor of flatten_params' vector (parameters, then with `buffers` the
floating-point buffers) becomes a view of one float32 vector, returned. Training updates it in
place; the client then makes its delta in that vector (new - global, where the new weights lie)
instead of in a copy of the model's size: the next round loads the model from its replica anyway.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from commlab.models import _tensors


def share_storage(model: nn.Module, buffers: bool = False) -> np.ndarray:
    """Make the model's tensors (flatten_params order, the same `buffers`) views of one new float32
    vector holding their values; returns it (numpy, sharing the memory). ValueError: a tensor
    that is not float32."""
    tensors = _tensors(model, buffers)
    for name, t in tensors:
        if t.dtype != torch.float32:
            raise ValueError(f"share_storage: {name} is {t.dtype}; one float32 vector holds float32 tensors only")
    flat = torch.empty(sum(t.numel() for _, t in tensors), dtype=torch.float32)
    offset = 0
    with torch.no_grad():
        for _, t in tensors:
            piece = flat[offset: offset + t.numel()].view_as(t)
            piece.copy_(t)
            t.data = piece
            offset += t.numel()
    return flat.numpy()


def backs(storage: np.ndarray, model: nn.Module, buffers: bool = False) -> bool:
    """Whether `storage` (from share_storage) still holds every one of the model's tensors, where
    flatten_params puts them (something that replaced a tensor would leave a stale vector)."""
    base, offset = storage.ctypes.data, 0
    for _, t in _tensors(model, buffers):
        if t.data_ptr() != base + 4 * offset or not t.is_contiguous():
            return False
        offset += t.numel()
    return offset == storage.size

