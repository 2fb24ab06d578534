"""Allreduce exchange: every step one allreduce (mean) of all gradients as one flat vector in the
compressor's frames (schedule: training.collective, ring unless data is multicast), then momentum
SGD. With fp32 (method "dense") it is the reference every compressed method is compared with;
fp16 and bf16 halve its bytes. Their values are summed in transit: every rank ends with the same
mean, and no rank sees its own frame come back, so such compressors carry no memory (Codec.exchange
ALLREDUCE). fp32 values cross as the collective's own raw float32 blocks: the same bytes without
a frame header, so no block is copied to build or to parse a frame.

The dense fp32 ring overlaps backward (overlap.py; training.overlap, on by default): the step's
allreduce starts before backward and the gradients join it as backward produces them. Compressed
frames (fp16, bf16) and the naive schedule start after backward, with the whole vector."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

from commlab.codecs import Compression
from commlab.codecs.fp32 import Fp32
from commlab.dds import Group
from commlab.ddp.config import TrainingSection
from commlab.ddp.overlap import Pending, Reducer
from commlab.models import flatten_grads, load_grads


class DenseAllreduce:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, compression: Compression,
                 steps_per_epoch: int):
        self.group, self.model, self.codec = group, model, compression.codec
        self.wire = None if isinstance(self.codec, Fp32) else self.codec  # None: the collective's raw float32
        group.collective = training.collective  # auto (default), ring or naive, for every allreduce
        overlap = training.overlap and self.wire is None and group.world > 1 and group.schedule() == "ring"
        self.reducer = Reducer(model, group.node.announcer.directory.changed) if overlap else None
        self._pending: Pending | None = None
        self._waited = 0.0  # CommStats.wait_s when the overlapped allreduce started
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    @contextmanager
    def backward(self, step: int) -> Iterator[None]:
        """Wrap loss.backward(): with overlap, the step's allreduce starts here and is fed the
        gradients as they come; exchange(step) then waits for it."""
        if self.reducer is None:
            yield
            return
        self._waited = self.group.node.stats.wait_s
        with self.reducer.filling():
            handle = self.group.allreduce_async(f"{step}/grads", self.reducer.flat, op="mean",
                                                ready=self.reducer.ready, kept=True)
            self._pending = Pending(handle.wait, f"allreduce {step}/grads")
            yield

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the mean over ranks; returns (compress_s, decompress_s, density).
        Encoding and decoding happen block by block inside the collective, so they count as its time."""
        t0 = time.perf_counter()
        if self._pending is not None:  # overlapped: the gradients were copied during backward
            pending, self._pending = self._pending, None
            t1 = t0
            mean = pending.result()
            self._count_exposed_wait(time.perf_counter() - t0)
        else:
            local = flatten_grads(self.model)
            t1 = time.perf_counter()
            mean = self.group.allreduce(f"{step}/grads", local, op="mean", codec=self.wire)
        t2 = time.perf_counter()
        load_grads(self.model, mean, share=True)  # the collective's own new vector
        return t1 - t0, time.perf_counter() - t2, 1.0

    def _count_exposed_wait(self, blocked_s: float) -> None:
        """Network wait during backward hid behind compute: CommStats.wait_s (the step's comm time)
        keeps only what the training thread was blocked for after backward, at most."""
        stats = self.group.node.stats
        hidden = stats.wait_s - self._waited - blocked_s
        if hidden > 0:
            stats.add(wait_s=-hidden)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
