"""The DDP exchange of every compressor whose frames cannot be summed (Codec.exchange ALLGATHER):
compensate (the compressor's memory), encode, allgather the frames, decode every rank's frame and
average; dense.py is the reference it is compared with.

Per step each rank sends one frame (codec.wire_size bytes at most) to its peers instead of the
dense vector. What the codec drops stays in this rank's memory and joins the next step's gradient
(error feedback; for DGC the momentum-corrected velocity), so it is delayed, not lost. With DGC the
momentum lives in the memory, so weight decay joins the gradient before compensation and the
optimizer is plain SGD; otherwise the optimizer is the same momentum SGD as the dense reference.

    exchange = FrameAllgather(group, model, training, build_compression("int8", {}, layout, setting="ddp"),
                              steps_per_epoch)
    compress_s, decompress_s, density = exchange.exchange(step)   # every .grad is now the average
    exchange.optimizer.step()
"""
from __future__ import annotations

import time

import numpy as np
import torch

from commlab.codecs import CodecError, Compression
from commlab.dds import Group
from commlab.ddp.checkpoint import as_arrays, as_tensors
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, flatten_params, load_grads


class FrameError(ValueError):
    """A rank's frame does not decode to a finite gradient of this model; names the rank."""


class FrameAllgather:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, compression: Compression,
                 steps_per_epoch: int):
        self.group, self.model, self.compression, self.steps_per_epoch = group, model, compression, steps_per_epoch
        self.fold_weight_decay = self.compression.memory.applies_momentum
        self.weight_decay = training.weight_decay
        if self.fold_weight_decay:
            self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr)
        else:
            self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                             nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the mean of all ranks' decoded frames; returns
        (compress_s, decompress_s, share of the compressible coordinates this rank sent)."""
        t0 = time.perf_counter()
        grad = flatten_grads(self.model)
        if self.fold_weight_decay:  # so that weight decay is momentum-corrected too
            grad += self.weight_decay * flatten_params(self.model)
        self.compression.at_step(step, self.steps_per_epoch)
        frame, sent = self.compression.compress(grad)
        t1 = time.perf_counter()
        frames = self.group.allgather(f"{step}/{self.compression.codec.name}", frame)
        t2 = time.perf_counter()
        total = np.zeros(sent.size, np.float32)
        for rank, received in enumerate(frames):
            try:
                decoded = self.compression.codec.decode(received, numel=sent.size)
            except CodecError as e:
                raise FrameError(f"frame from rank {rank}: {e}") from None
            if not np.isfinite(decoded).all():
                raise FrameError(f"frame from rank {rank}: holds NaN or Inf")
            if rank == self.group.rank:
                own = decoded
            total += decoded
        self.compression.remember(sent, own)  # what the others saw of this rank: its decoded frame
        load_grads(self.model, total / self.group.world)
        return t1 - t0, time.perf_counter() - t2, self.compression.sent_share(own)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "compression": as_tensors(self.compression.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.compression.load_state_dict(as_arrays(state["compression"]))
