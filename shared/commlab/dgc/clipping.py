"""Local gradient clipping (DGC section 3.4): clip each worker's own gradient before it joins the
accumulation; the threshold is scaled by 1/sqrt(world) because the aggregate of `world`
independent gradients has about sqrt(world) times the norm of one."""
from __future__ import annotations

import math

import torch


def clip_local_(grads: list[torch.Tensor], max_norm: float, world: int) -> float:
    """Scale `grads` in place so their joint L2 norm is <= max_norm/sqrt(world); returns the norm."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    limit = max_norm / math.sqrt(world)
    if total > limit:
        for g in grads:
            g.mul_(limit / (float(total) + 1e-6))
    return float(total)
