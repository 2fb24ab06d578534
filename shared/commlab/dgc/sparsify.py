"""Top-k selection by a threshold estimated on a random sample of |x| (DGC section 3.1).

Exact top-k over a million coordinates every step is the expensive part of DGC; a threshold from
a 1% sample selects about the same set. The count is then kept within [lower, upper] x k by
lowering the threshold, and an exact top-k over the over-selected set caps it from above.
"""
from __future__ import annotations

import math

import torch


def target_count(numel: int, density: float) -> int:
    return max(1, min(numel, math.ceil(numel * density)))


def sparsify(x: torch.Tensor, density: float, sample_ratio: float = 0.01, lower: float = 0.8,
             upper: float = 1.3, max_iters: int = 10,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Sorted int64 indices of roughly the `density` largest-magnitude entries of x."""
    importance = x.reshape(-1).abs()
    numel = importance.numel()
    k = target_count(numel, density)
    if k == numel:
        return torch.arange(numel)
    # At least 2/density samples so the sample holds >= 2 "selected" entries on average.
    num_samples = max(math.ceil(numel * sample_ratio), math.ceil(2 / density))
    if num_samples >= numel:
        return torch.topk(importance, k, sorted=False).indices.sort().values
    samples = importance[torch.randint(0, numel, (num_samples,), generator=generator)]
    threshold = torch.topk(samples, target_count(num_samples, density), sorted=False).values.min()
    indices = torch.nonzero(importance >= threshold).view(-1)
    for _ in range(max_iters):
        if indices.numel() > upper * k:
            break
        if indices.numel() >= lower * k:
            return indices
        threshold = threshold * lower
        indices = torch.nonzero(importance >= threshold).view(-1)
    # Too many (or adaptation did not converge): exact top-k among the candidates.
    if indices.numel() > k:
        indices = indices[torch.topk(importance[indices], k, sorted=False).indices].sort().values
    return indices
