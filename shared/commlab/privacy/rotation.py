"""A seeded random rotation of a model update, so that every coordinate of a clipped update is small
and of about the same size: the step of a shared integer grid can then follow the update's norm
instead of its largest coordinate (Kairouz, Liu, Steinke 2021, "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation", section 4: random rotation before
quantization).

The rotation is a random permutation of the coordinates, a random sign for each, then a normalised
Walsh-Hadamard transform on each block of BLOCK coordinates (orthonormal: norms are kept, and it is
its own inverse). The permutation mixes every layer into every block; the Hadamard transform then
spreads each block's norm evenly over its coordinates, which come out close to Gaussian of standard
deviation |update| / sqrt(padded length). The vector is padded with zeros to a whole number of blocks.
It is linear: the sum of rotated updates is the rotation of their sum, and `inverse` of it is the sum.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

BLOCK = 4096  # a power of two; at most BLOCK - 1 zeros padded
STREAM = 0x524F54  # "ROT": the rotation's random stream, apart from any other use of its seed


def padded_length(length: int) -> int:
    """`length` rounded up to a whole number of blocks."""
    return -(-length // BLOCK) * BLOCK


def _hadamard(blocks: np.ndarray) -> np.ndarray:
    """The normalised Walsh-Hadamard transform of each row of `blocks` (float64), in place."""
    h = 1
    while h < BLOCK:
        pairs = blocks.reshape(blocks.shape[0], -1, 2, h)
        first = pairs[:, :, 0, :].copy()
        pairs[:, :, 0, :] += pairs[:, :, 1, :]
        np.subtract(first, pairs[:, :, 1, :], out=pairs[:, :, 1, :])
        h *= 2
    blocks *= BLOCK ** -0.5
    return blocks


@dataclass(frozen=True)
class Rotation:
    seed: int      # public: every client of a round and the controller rotate alike
    length: int    # coordinates of an update

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"a rotation of {self.length} coordinates: need at least 1")

    @property
    def padded(self) -> int:
        return padded_length(self.length)

    @cached_property
    def _draws(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([STREAM, self.seed])
        return rng.permutation(self.padded), rng.integers(0, 2, self.padded).astype(np.float64) * 2 - 1

    def forward(self, update: np.ndarray) -> np.ndarray:
        """The rotated update: `padded` float64 values."""
        if update.shape != (self.length,):
            raise ValueError(f"an update of shape {update.shape}, the rotation takes ({self.length},)")
        perm, signs = self._draws
        spread = np.zeros(self.padded)
        spread[: self.length] = update
        return _hadamard((spread[perm] * signs).reshape(-1, BLOCK)).reshape(-1)

    def inverse(self, rotated: np.ndarray) -> np.ndarray:
        """The update whose rotation is `rotated` (the padding dropped)."""
        if rotated.shape != (self.padded,):
            raise ValueError(f"a rotated vector of shape {rotated.shape}, the rotation gives ({self.padded},)")
        perm, signs = self._draws
        unspread = _hadamard(rotated.astype(np.float64).reshape(-1, BLOCK)).reshape(-1) * signs
        out = np.empty(self.padded)
        out[perm] = unspread
        return out[: self.length]
