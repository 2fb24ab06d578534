"""Compressor parameters over time. A compressor's hook (Codec.build) may return a Schedule;
Compression.at_step runs it before every frame. DGC's density warm-up is the one with stages:
start dense-ish and tighten in equal stages so early, fast-changing gradients are not starved
(paper: 25% -> 6.25% -> 1.5625% -> 0.4% -> 0.1%)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

PAPER_STAGES = (0.25, 0.0625, 0.015625, 0.004)


class Schedule(Protocol):
    def at_step(self, step: int, steps_per_epoch: int) -> None:
        """Set what changes over time for the frame of global step `step` (FL: the round)."""

    def steady_from(self, steps_per_epoch: int) -> int:
        """The first step at the final setting (after a warm-up)."""


@dataclass(frozen=True)
class Warmup:
    final_density: float = 0.001
    stages: tuple[float, ...] = PAPER_STAGES
    length: float = 0.0        # warm-up length in `unit`s, split evenly over `stages`; 0 = none
    unit: str = "steps"        # "steps" | "epochs"

    def __post_init__(self) -> None:
        if self.unit not in ("steps", "epochs"):
            raise ValueError(f"warm-up unit must be 'steps' or 'epochs', not {self.unit!r}")
        if not 0.0 < self.final_density <= 1.0 or any(not 0.0 < d <= 1.0 for d in self.stages):
            raise ValueError("densities must be in (0, 1]")
        if self.length < 0:
            raise ValueError("warm-up length must be >= 0")

    def done(self, step: int, steps_per_epoch: int) -> bool:
        """True once `step` runs at the final density."""
        progress = step if self.unit == "steps" else step / steps_per_epoch
        return progress >= self.length

    def first_final_step(self, steps_per_epoch: int) -> int:
        """The first step `done` is true for."""
        return math.ceil(self.length * (1 if self.unit == "steps" else steps_per_epoch))

    def density(self, step: int, steps_per_epoch: int) -> float:
        """Density at global step `step` (0-based); epochs count fractionally within an epoch."""
        if self.length == 0 or not self.stages:
            return self.final_density
        progress = step if self.unit == "steps" else step / steps_per_epoch
        stage = int(progress * len(self.stages) / self.length)
        return self.stages[stage] if stage < len(self.stages) else self.final_density
