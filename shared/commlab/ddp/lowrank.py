"""PowerSGD as a DDP exchange (Vogels et al. 2019; PyTorch's powerSGD_hook is the behaviour matched):
two small allreduces per step instead of one of the whole gradient.

Per step: M = gradient + error (ErrorFeedback); allreduce [P = M Q for every matrix, and every
tensor that travels whole]; orthogonalise the averaged P (the same on every rank); allreduce
[Q = M^T P]; the gradient is P Q^T (and the averaged whole tensors); the error keeps M - P Q^T for
the matrices. Q is kept for the next step (warm start). Before `start_iter` every step is a plain
dense allreduce, as the hook's start_powerSGD_iter.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from commlab.codecs import ErrorFeedback, get_codec
from commlab.codecs.powersgd import orthogonalize
from commlab.dds import Group
from commlab.ddp.checkpoint import as_arrays, as_tensors
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, layout_of, load_grads


class LowRankAllreduce:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, method: str,
                 params: dict[str, Any]):
        self.group, self.model, self.method = group, model, method
        group.collective = training.collective  # auto (default), ring or naive, for every allreduce
        # Same seed on every rank: the initial Qs must agree, they are never exchanged.
        self.codec = get_codec(method, layout=layout_of(model), **{"seed": training.seed, **params})
        self.memory = ErrorFeedback()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the low-rank average; returns (compress_s, decompress_s, density
        as the share of the dense vector's values sent)."""
        grad = flatten_grads(self.model)
        if step < self.codec.start_iter:
            load_grads(self.model, self.group.allreduce(f"{step}/{self.method}/dense", grad, op="mean"))
            return 0.0, 0.0, 1.0
        t0 = time.perf_counter()
        m_all = self.memory.compensate(grad)
        mats = [self.codec.view(m_all, mat) for mat in self.codec.matrices]
        dense = m_all[self.codec.dense_idx]
        first = np.concatenate([*(m @ q for m, q in zip(mats, self.codec.qs))] + [dense], axis=None)
        compress_s = time.perf_counter() - t0
        first = self.group.allreduce(f"{step}/{self.method}/p", first.ravel(), op="mean")
        t1 = time.perf_counter()
        ps, pos = [], 0
        for q in self.codec.qs:
            n = mats[len(ps)].shape[0]
            ps.append(orthogonalize(first[pos:pos + n * q.shape[1]].reshape(n, q.shape[1])))
            pos += n * q.shape[1]
        second = np.concatenate([(m.T @ p).ravel() for m, p in zip(mats, ps)] or [np.zeros(0, np.float32)])
        compress_s += time.perf_counter() - t1
        second = self.group.allreduce(f"{step}/{self.method}/q", second, op="mean")
        t2 = time.perf_counter()
        approx, pos = m_all.copy(), 0  # whole tensors: own value for the error, average for the step
        for k, (mat, p) in enumerate(zip(self.codec.matrices, ps)):
            q = second[pos:pos + mat.m * p.shape[1]].reshape(mat.m, p.shape[1])
            pos += q.size
            self.codec.qs[k] = q
            approx[mat.offset:mat.offset + mat.n * mat.m] = (p @ q.T).ravel()
        self.memory.update(m_all, approx)
        approx[self.codec.dense_idx] = first[first.size - dense.size:]
        load_grads(self.model, approx)
        sent = first.size + second.size
        return compress_s, time.perf_counter() - t2, sent / max(grad.size, 1)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "memory": as_tensors(self.memory.state_dict()), "codec": as_tensors(self.codec.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.memory.load_state_dict(as_arrays(state["memory"]))
        self.codec.load_state_dict(as_arrays(state["codec"]))
