"""PowerSGD as a DDP exchange (Vogels et al. 2019; PyTorch's powerSGD_hook is the behaviour matched):
two small allreduces per step instead of one of the whole gradient.

Per step: M = gradient + error (the compressor's ErrorFeedback); allreduce [P = M Q for every
matrix, and every tensor that travels whole]; orthogonalise the averaged P (the same on every
rank); allreduce [Q = M^T P]; the gradient is P Q^T (and the averaged whole tensors); the error
keeps M - P Q^T for the matrices. Q is kept for the next step (warm start). Before `start_iter`
(the compressor's schedule) every step is a plain dense allreduce, as the hook's
start_powerSGD_iter. The maths is the codec's (PowerSgd.lowrank_*); this file moves the vectors.
"""
from __future__ import annotations

import time

import torch

from commlab.codecs import Compression
from commlab.dds import Group
from commlab.ddp.checkpoint import as_arrays, as_tensors
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, load_grads


class LowRankAllreduce:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, compression: Compression,
                 steps_per_epoch: int):
        self.group, self.model, self.compression, self.steps_per_epoch = group, model, compression, steps_per_epoch
        self.codec, self.memory = compression.codec, compression.memory
        group.collective = training.collective  # auto (default), ring or naive, for every allreduce
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the low-rank average; returns (compress_s, decompress_s, density
        as the share of the dense vector's values sent)."""
        grad = flatten_grads(self.model)
        key = f"{step}/{self.codec.name}"
        self.compression.at_step(step, self.steps_per_epoch)
        if self.codec.whole:
            load_grads(self.model, self.group.allreduce(f"{key}/dense", grad, op="mean"))
            return 0.0, 0.0, 1.0
        t0 = time.perf_counter()
        m = self.memory.compensate(grad)
        first = self.codec.lowrank_p(m)
        compress_s = time.perf_counter() - t0
        first = self.group.allreduce(f"{key}/p", first, op="mean")
        t1 = time.perf_counter()
        ps, second = self.codec.lowrank_q(m, first)
        compress_s += time.perf_counter() - t1
        second = self.group.allreduce(f"{key}/q", second, op="mean")
        t2 = time.perf_counter()
        approx = self.codec.lowrank_product(m, ps, second)  # whole tensors: own value for the error
        self.memory.update(m, approx)
        self.codec.lowrank_whole(approx, first)             # and the average for the step
        load_grads(self.model, approx)
        return compress_s, time.perf_counter() - t2, (first.size + second.size) / max(grad.size, 1)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "memory": as_tensors(self.memory.state_dict()), "codec": as_tensors(self.codec.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.memory.load_state_dict(as_arrays(state["memory"]))
        self.codec.load_state_dict(as_arrays(state["codec"]))
