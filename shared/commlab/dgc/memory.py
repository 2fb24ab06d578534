"""Momentum correction and local accumulation (DGC sections 3.2, 3.3).

Momentum is applied here, before sparsification, so the residual that stays local is the
accumulated *velocity*, not the raw gradient; the optimizer then does plain SGD. Momentum factor
masking zeroes the momentum of coordinates just sent, so stale momentum does not push them again.
"""
from __future__ import annotations

import torch


class DgcMemory:
    def __init__(self, momentum: float = 0.9, nesterov: bool = False, masking: bool = True):
        self.momentum = momentum
        self.nesterov = nesterov
        self.masking = masking
        self.momentums: dict[str, torch.Tensor] = {}
        self.velocities: dict[str, torch.Tensor] = {}

    def compensate(self, name: str, grad: torch.Tensor, accumulate: bool) -> torch.Tensor:
        """Momentum step on `grad`; with accumulate, add it to the velocity and return that."""
        if name not in self.momentums:
            self.momentums[name] = torch.zeros_like(grad)
            self.velocities[name] = torch.zeros_like(grad)
        mmt = self.momentums[name]
        if self.nesterov:
            mmt.add_(grad).mul_(self.momentum)
            step = mmt + grad
        else:
            mmt.mul_(self.momentum).add_(grad)
            step = mmt
        if not accumulate:
            return step.clone() if step is mmt else step
        return self.velocities[name].add_(step)

    def update(self, name: str, indices: torch.Tensor, sent: torch.Tensor) -> None:
        """Remove what was sent from the velocity (keeping any rounding error of `sent`)."""
        self.velocities[name].view(-1).index_add_(0, indices, sent, alpha=-1.0)
        if self.masking:
            self.momentums[name].view(-1).index_fill_(0, indices, 0.0)

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "nesterov": self.nesterov, "masking": self.masking,
                "momentums": {k: v.clone() for k, v in self.momentums.items()},
                "velocities": {k: v.clone() for k, v in self.velocities.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.momentum, self.nesterov, self.masking = (state["momentum"], state["nesterov"],
                                                      state["masking"])
        self.momentums = {k: v.clone() for k, v in state["momentums"].items()}
        self.velocities = {k: v.clone() for k, v in state["velocities"].items()}
