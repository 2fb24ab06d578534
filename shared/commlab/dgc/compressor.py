"""DGC for a whole model: one frame out per step, the average of everyone's frames back.

Per large tensor: momentum-corrected accumulation (memory) -> sampled top-k (sparsify) -> remove
what was sent from the velocity (memory.update) -> (indices, values). Tensors with <= 1 dimension
or fewer than `min_sparse_numel` elements get the same momentum but travel dense: they are a tiny
share of the bytes and sparsifying biases hurts accuracy (the reference does the same).
"""
from __future__ import annotations

import numpy as np
import torch

from commlab.dgc.frame import FP16_MAX, FrameError, decode_frame, encode_frame
from commlab.dgc.memory import DgcMemory
from commlab.dgc.sparsify import sparsify


class DgcCompressor:
    def __init__(self, named_shapes: list[tuple[str, torch.Size]], world: int,
                 memory: DgcMemory, sample_ratio: float = 0.01, min_sparse_numel: int = 1024,
                 fp16_values: bool = True, seed: int = 0):
        self.names = [n for n, _ in named_shapes]
        self.shapes = {n: torch.Size(s) for n, s in named_shapes}
        self.sparse = {n: len(s) > 1 and s.numel() >= min_sparse_numel for n, s in named_shapes}
        self.sparse_numels = [self.shapes[n].numel() for n in self.names if self.sparse[n]]
        self.dense_numel = sum(self.shapes[n].numel() for n in self.names if not self.sparse[n])
        self.world = world
        self.memory = memory
        self.sample_ratio = sample_ratio
        self.fp16_values = fp16_values
        self.generator = torch.Generator().manual_seed(seed)
        self.last_selected = 0  # coordinates this rank sent in the last frame (sparse part)

    def compress(self, grads: list[torch.Tensor], density: float) -> bytes:
        """Gradients in layout order -> this rank's frame; updates the memory."""
        sparse, dense = [], []
        for name, grad in zip(self.names, grads):
            if not self.sparse[name]:
                dense.append(self.memory.compensate(name, grad, accumulate=False).reshape(-1))
                continue
            velocity = self.memory.compensate(name, grad, accumulate=True)
            indices = sparsify(velocity, density, self.sample_ratio, generator=self.generator)
            values = velocity.reshape(-1)[indices]
            if self.fp16_values:  # what the receivers will see; the rounding error stays local
                values = values.clamp(-FP16_MAX, FP16_MAX).half().float()
            self.memory.update(name, indices, values)
            sparse.append((indices.numpy(), values.numpy()))
        self.last_selected = sum(i.size for i, _ in sparse)
        flat_dense = torch.cat(dense).numpy() if dense else np.zeros(0, np.float32)
        return encode_frame(sparse, self.sparse_numels, flat_dense, self.fp16_values)

    def aggregate(self, frames: list[bytes | memoryview]) -> list[torch.Tensor]:
        """Average of all ranks' frames, as one tensor per parameter in layout order."""
        sums = [np.zeros(n, np.float32) for n in self.sparse_numels]
        dense = np.zeros(self.dense_numel, np.float32)
        for rank, frame in enumerate(frames):
            try:
                sparse, dense_part = decode_frame(frame, self.sparse_numels, self.dense_numel)
            except FrameError as e:
                raise FrameError(f"frame from rank {rank}: {e}") from None
            for acc, (indices, values) in zip(sums, sparse):
                acc[indices] += values  # indices are unique within one frame
            dense += dense_part
        out, s, d = [], iter(sums), 0
        for name in self.names:
            shape = self.shapes[name]
            if self.sparse[name]:
                flat = next(s)
            else:
                flat, d = dense[d:d + shape.numel()], d + shape.numel()
            out.append(torch.from_numpy(flat / self.world).view(shape))
        return out

    def state_dict(self) -> dict:
        return {"memory": self.memory.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.generator.set_state(state["generator"])
