"""Allreduce exchange: every step one allreduce (mean) of all gradients as one flat vector in the
compressor's frames (schedule: training.collective, ring unless data is multicast), then momentum
SGD. With fp32 (method "dense") it is the reference every compressed method is compared with;
fp16 and bf16 halve its bytes. Their values are summed in transit: every rank ends with the same
mean, and no rank sees its own frame come back, so such compressors carry no memory (Codec.exchange
ALLREDUCE). fp32 values cross as the collective's own raw float32 blocks: the same bytes without
a frame header, so no block is copied to build or to parse a frame."""
from __future__ import annotations

import time

import torch

from commlab.codecs import Compression
from commlab.codecs.fp32 import Fp32
from commlab.dds import Group
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, load_grads


class DenseAllreduce:
    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection, compression: Compression,
                 steps_per_epoch: int):
        self.group, self.model, self.codec = group, model, compression.codec
        self.wire = None if isinstance(self.codec, Fp32) else self.codec  # None: the collective's raw float32
        group.collective = training.collective  # auto (default), ring or naive, for every allreduce
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the mean over ranks; returns (compress_s, decompress_s, density).
        Encoding and decoding happen block by block inside the collective, so they count as its time."""
        t0 = time.perf_counter()
        local = flatten_grads(self.model)
        t1 = time.perf_counter()
        mean = self.group.allreduce(f"{step}/grads", local, op="mean", codec=self.wire)
        t2 = time.perf_counter()
        load_grads(self.model, mean)
        return t1 - t0, time.perf_counter() - t2, 1.0

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
