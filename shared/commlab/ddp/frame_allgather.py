"""Any registered codec as a DDP gradient exchange: error feedback, encode, allgather the frames,
decode every rank's frame and average; then the same momentum SGD as the dense reference.

Per step each rank sends one frame (codec.wire_size bytes) to its peers instead of the dense
vector; what the codec drops stays in this rank's residual (ErrorFeedback) and is added to the
next step's gradient, so it is delayed, not lost.

    exchange = FrameAllgather(group, model, training, "int8")
    compress_s, decompress_s, density = exchange.exchange(step)   # every .grad is now the average
    exchange.optimizer.step()
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from commlab.codecs import CodecError, ErrorFeedback, get_codec
from commlab.dds import Group
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, load_grads


class FrameError(ValueError):
    """A rank's frame does not decode to a gradient of this model; names the rank."""


class FrameAllgather:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, codec_name: str,
                 codec_params: dict[str, Any] | None = None):
        self.group, self.model, self.method = group, model, codec_name
        self.codec = get_codec(codec_name, **(codec_params or {}))
        self.memory = ErrorFeedback() if self.codec.lossy else None
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the mean of all ranks' decoded frames; returns
        (compress_s, decompress_s, share of coordinates this rank's frame carries as non-zero)."""
        t0 = time.perf_counter()
        sent = flatten_grads(self.model)
        if self.memory is not None:
            sent = self.memory.compensate(sent)
        frame = self.codec.encode(sent)
        t1 = time.perf_counter()
        frames = self.group.allgather(f"{step}/{self.method}", frame)
        t2 = time.perf_counter()
        total = np.zeros(sent.size, np.float32)
        for rank, received in enumerate(frames):
            try:
                decoded = self.codec.decode(received, numel=sent.size)
            except CodecError as e:
                raise FrameError(f"frame from rank {rank}: {e}") from None
            if not np.isfinite(decoded).all():
                raise FrameError(f"frame from rank {rank}: holds NaN or Inf")
            if rank == self.group.rank:
                own = decoded
            total += decoded
        if self.memory is not None:
            self.memory.update(sent, own)  # what the others saw of this rank: the decoded frame
        load_grads(self.model, total / self.group.world)
        return t1 - t0, time.perf_counter() - t2, float(np.count_nonzero(own)) / max(sent.size, 1)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "memory": None if self.memory is None else self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.memory is not None and state.get("memory") is not None:
            self.memory.load_state_dict(state["memory"])
