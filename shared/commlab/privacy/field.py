"""Updates as integers modulo 2**bits for secure aggregation: the clients' masked vectors sum,
mask by mask, to the sum of their quantized updates, so the grid must be the same for every client.

A codec's own scale (int8's and minmax's per-chunk ranges, qsgd's per-bucket norms) differs from
client to client, and integers on different grids do not add up to the sum of the values. Here the
grid is shared: `steps` equal steps over [-bound, bound] (bound: the clip norm, which bounds every
coordinate of a clipped update, or for a rotated update a few standard deviations of its
coordinates: commlab.privacy.update_grid), with the level counts of the codecs (FIELD_STEPS), and stochastic
rounding as qsgd's, so a quantized update is unbiased. The modulus is the smallest power of two
that holds the sum of `clients` updates without wrapping: log2(clients) bits a coordinate above the
codec's own.

Codecs that cannot be combined: the sparsifiers (topk, randomk, dgc, int8_sparse) send values at
positions each client chooses; masked vectors must be dense (a mask on the chosen positions only
would tell the controller which ones they are), so the sparsity saves nothing. powersgd sends
low-rank factors, and the sum of factors is not the factorisation of the sum. fp32, fp16 and bf16
are floating point: no integer grid to keep.

Distributed DP (docs/privacy.md): with `noise_std` > 0 every client adds Skellam noise to its
levels (add_noise), of variance noise_std**2 / clients, so the sum of `clients` updates carries
Skellam noise of variance noise_std**2 (the sum of independent Skellams is Skellam: Agarwal, Kairouz
and Liu 2021, "The Skellam Mechanism for Differentially Private Federated Learning"). A noised
level may fall below 0 or above `steps`: the field then holds the sum plus TAIL standard deviations
either side, and decode_sum reads the sum as a signed offset from its centre.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

# Codec name pattern -> steps over [-bound, bound] as a function of its number.
FIELD_STEPS = {r"int8": lambda _: 254, r"qsgdz?(\d+)": lambda s: 2 * s, r"minmax(\d)": lambda n: 2 ** n - 1,
               r"terngrad": lambda _: 2}
UNCOMBINABLE = {"topk": "sparsity: each client chooses its positions, masked vectors must be dense",
                "randomk": "sparsity: each client chooses its positions, masked vectors must be dense",
                "dgc": "sparsity: each client chooses its positions, masked vectors must be dense",
                "int8_sparse": "sparsity: each client chooses its positions, masked vectors must be dense",
                "powersgd": "low rank: the sum of the clients' factors is not the factorisation of the sum"}
MAX_BITS = 32
# Standard deviations of the summed noise the field holds either side of the levels' range: the sum
# of a coordinate falls outside with probability ~1e-15 (Gaussian tail), once in ~1e9 models of 1e6.
TAIL = 8


def field_steps(codec: str) -> int:
    """The steps over [-bound, bound] of a codec's levels; ValueError naming why a codec has none."""
    for pattern, steps in FIELD_STEPS.items():
        if (m := re.fullmatch(pattern, codec)) is not None:
            return steps(int(m.group(1)) if m.groups() else 0)
    reason = UNCOMBINABLE.get(codec, "not a quantizer: no integer levels (use int8, qsgd<s>, minmax<n>, terngrad)")
    raise ValueError(f"codec {codec!r} cannot be combined with secure aggregation: {reason}")


@dataclass(frozen=True)
class FieldQuantizer:
    bound: float   # every coordinate is clipped to [-bound, bound]
    steps: int     # grid steps over [-bound, bound]
    clients: int   # the most updates summed
    noise_std: float = 0.0  # std, in levels, of the noise on the sum of `clients` updates (0: none)

    def __post_init__(self) -> None:
        if not self.bound > 0 or self.steps < 1 or self.clients < 1 or not self.noise_std >= 0:
            raise ValueError(f"need bound > 0, steps >= 1, clients >= 1, noise_std >= 0; got {self.bound}, "
                             f"{self.steps}, {self.clients}, {self.noise_std}")
        if self.bits > MAX_BITS:
            raise ValueError(f"{self.clients} sums of {self.steps} steps need {self.bits} bits, more than {MAX_BITS}")

    @property
    def bits(self) -> int:
        """Bits a coordinate of the field: the sum of `clients` levels in 0..steps never wraps, nor
        (with noise) the sum plus or minus TAIL standard deviations of the noise."""
        if self.noise_std == 0:
            return (self.clients * self.steps).bit_length()
        return (self.clients * self.steps + 2 * self.headroom + 2).bit_length()

    @property
    def headroom(self) -> int:
        """Levels the noised sum may take beyond 0..clients * steps."""
        return math.ceil(TAIL * self.noise_std)

    @property
    def max_level(self) -> int:
        """The largest level of one client: `steps`, or with noise any element of the field."""
        return self.steps if self.noise_std == 0 else self.modulus - 1

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    def encode(self, update: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Levels 0..steps (uint32) of `update` clipped to [-bound, bound], stochastically rounded."""
        scaled = (np.clip(update.astype(np.float64), -self.bound, self.bound) + self.bound) * (self.steps / (2 * self.bound))
        low = np.floor(scaled)
        return np.minimum(low + (rng.random(scaled.shape) < scaled - low), self.steps).astype(np.uint32)

    def add_noise(self, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """`levels` plus one client's share of the noise, modulo the field: Skellam (the difference
        of two Poisson draws of mean mu) of variance 2 * mu = noise_std**2 / clients."""
        mu = self.noise_std ** 2 / (2 * self.clients)
        noise = rng.poisson(mu, levels.shape) - rng.poisson(mu, levels.shape)
        return ((levels.astype(np.int64) + noise) % self.modulus).astype(np.uint32)
    def decode_sum(self, total: np.ndarray, count: int) -> np.ndarray:
        """The sum of `count` updates from the sum of their levels (reduced modulo the field)."""
        if not 1 <= count <= self.clients:
            raise ValueError(f"a sum of {count} updates, the field holds 1..{self.clients}")
        levels = total.astype(np.int64)
        if self.noise_std:  # a signed offset from the centre of the range: noise may take it below 0
            centre = count * self.steps // 2
            levels = (levels - centre) % self.modulus
            levels = np.where(levels >= self.modulus // 2, levels - self.modulus, levels) + centre
        return levels * (2 * self.bound / self.steps) - count * self.bound
