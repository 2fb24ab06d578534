"""DGC exchange: weight decay, local clipping, momentum-corrected top-k, one frame per rank
allgathered, the average of all frames as the gradient; then plain SGD (momentum already lives in
the DGC memory, so the optimizer must not apply it again)."""
from __future__ import annotations

import time

import torch

from commlab.dds import Group
from commlab.ddp.config import DgcSection, TrainingSection
from commlab.dgc.clipping import clip_local_
from commlab.dgc.compressor import DgcCompressor
from commlab.dgc.memory import DgcMemory
from commlab.dgc.warmup import Warmup


class DgcAllgather:
    method = "dgc"

    def __init__(self, group: Group, model: torch.nn.Module, training: TrainingSection,
                 dgc: DgcSection, steps_per_epoch: int):
        self.group, self.model, self.cfg = group, model, dgc
        self.weight_decay = training.weight_decay
        self.steps_per_epoch = steps_per_epoch
        self.warmup = Warmup(dgc.final_density, dgc.warmup_stages, dgc.warmup_length, dgc.warmup_unit)
        memory = DgcMemory(training.momentum, training.nesterov, dgc.momentum_masking == "always")
        self.compressor = DgcCompressor([(n, p.shape) for n, p in model.named_parameters()], group.world,
                                        memory, dgc.sample_ratio, dgc.min_sparse_numel, dgc.fp16_values,
                                        seed=training.seed * 1_000_003 + group.rank)
        self.sparse_numel = sum(self.compressor.sparse_numels)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=training.lr)

    def exchange(self, step: int) -> tuple[float, float, float]:
        """Replace every .grad by the DGC aggregate; returns (compress_s, decompress_s, density sent)."""
        t0 = time.perf_counter()
        params = list(self.model.parameters())
        # Weight decay joins the gradient before compensation, so it is momentum-corrected too.
        grads = [p.grad.detach() + self.weight_decay * p.detach() for p in params]
        if self.cfg.clip_norm is not None:
            clip_local_(grads, self.cfg.clip_norm, self.group.world)
        if self.cfg.momentum_masking == "after_warmup":
            self.compressor.memory.masking = self.warmup.done(step, self.steps_per_epoch)
        frame = self.compressor.compress(grads, self.warmup.density(step, self.steps_per_epoch))
        t1 = time.perf_counter()
        frames = self.group.allgather(f"{step}/dgc", frame)
        t2 = time.perf_counter()
        for p, g in zip(params, self.compressor.aggregate(frames)):
            p.grad = g
        density = self.compressor.last_selected / self.sparse_numel if self.sparse_numel else 1.0
        return t1 - t0, time.perf_counter() - t2, density

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "dgc": self.compressor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.compressor.load_state_dict(state["dgc"])
