"""Dense reference exchange: every step one allreduce (mean) of all gradients as one flat fp32
vector (schedule: training.collective, ring unless data is multicast), then momentum SGD. Every
compressed method is compared against this."""
from __future__ import annotations

import time

import torch

from commlab.dds import Group
from commlab.ddp.config import TrainingSection
from commlab.models import flatten_grads, load_grads


class DenseAllreduce:
    method = "dense"

    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection):
        self.group, self.model = group, model
        group.collective = training.collective  # auto (default), ring or naive, for every allreduce
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr, momentum=training.momentum,
                                         nesterov=training.nesterov, weight_decay=training.weight_decay)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the mean over ranks; returns (compress_s, decompress_s, density)."""
        t0 = time.perf_counter()
        local = flatten_grads(self.model)
        t1 = time.perf_counter()
        mean = self.group.allreduce(f"{step}/grads", local, op="mean")
        t2 = time.perf_counter()
        load_grads(self.model, mean)
        return t1 - t0, time.perf_counter() - t2, 1.0

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
