"""How a client's update becomes integer levels of a SecAgg+ round, and how the sum of the clients'
levels becomes the sum of their updates (docs/privacy.md).

Every client clips its update to L2 norm `clip`, then puts it on the round's one grid (integers of
different grids do not add up). Without DP noise the update is first rotated (commlab.privacy.rotation,
a public seed per round): its coordinates are then near Gaussian of standard deviation at most
clip / sqrt(padded length), and the grid spans SPREAD of those either side, so its step follows the
update's norm. Without the rotation the grid must span [-clip, clip] (one coordinate may hold the
whole norm), and with int8's 254 steps over that range a coordinate of a typical update
(|update| / sqrt(length), about 1e-3 for a 1.7M-parameter model) is a tenth of a step: stochastic
rounding keeps it unbiased, but its noise is a few times the update itself.

With DP noise (z > 0) the grid stays [-clip, clip]: the noise on every coordinate of the sum, z * clip,
is far above that grid's rounding error, and on the rotated grid the same noise would take about
sqrt(length) / SPREAD times as many levels, so many more bits a coordinate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commlab.privacy.field import FieldQuantizer
from commlab.privacy.rotation import Rotation

# Bound of the rotated grid in standard deviations of a rotated coordinate of an update of norm
# `clip`: a coordinate beyond it (clipped to it) has probability 2 * Phi(-4) = 6e-5.
SPREAD = 4.0


def clipped(delta: np.ndarray, clip: float) -> np.ndarray:
    """`delta` scaled to L2 norm at most `clip`: every coordinate then lies in [-clip, clip]."""
    norm = float(np.linalg.norm(delta.astype(np.float64)))
    return delta if norm <= clip else (delta * (clip / norm)).astype(delta.dtype)


@dataclass(frozen=True)
class UpdateGrid:
    clip: float                  # L2 bound of a client's update
    quantizer: FieldQuantizer    # the grid's range, steps, and the field's bits
    length: int                  # coordinates of an update
    rotation: Rotation | None    # None: the grid is [-clip, clip] of the update itself

    @classmethod
    def of_round(cls, clip: float, steps: int, clients: int, length: int, noise: float = 0.0,
                 rotation_seed: int | None = None) -> UpdateGrid:
        """The grid of a round; `noise`: the DP noise multiplier z (its std on the sum is z * clip);
        `rotation_seed`: rotate (no noise only), or None."""
        if rotation_seed is None:
            return cls(clip, FieldQuantizer(clip, steps, clients, noise * steps / 2), length, None)
        if noise:
            raise ValueError("a rotated grid carries no DP noise (with noise the grid is [-clip, clip])")
        rotation = Rotation(rotation_seed, length)
        return cls(clip, FieldQuantizer(SPREAD * clip / math.sqrt(rotation.padded), steps, clients), length, rotation)

    @property
    def levels_length(self) -> int:
        """Integers a client sends: the padded rotated update, or the update's own coordinates."""
        return self.length if self.rotation is None else self.rotation.padded

    def encode(self, delta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A client's levels (uint32) of `delta`: clipped, rotated, stochastically rounded onto the grid."""
        update = clipped(delta, self.clip)
        return self.quantizer.encode(update if self.rotation is None else self.rotation.forward(update), rng)

    def decode_sum(self, total: np.ndarray, count: int) -> np.ndarray:
        """The sum of `count` clients' (clipped, quantized) updates from the sum of their levels."""
        summed = self.quantizer.decode_sum(total, count)
        return summed if self.rotation is None else self.rotation.inverse(summed)
