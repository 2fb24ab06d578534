"""The controller config section `adaptive`: policy, shared uplink, bits bounds, smoothing."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .bits import BITS

POLICIES = ("joint", "equal")
PROBE_ROUNDS = 2  # a goodput is reported with the next update: the allocation starts in round 3


@dataclass(frozen=True)
class AdaptiveSection:
    """Controller config `adaptive`: per-client qsgd bits and uplink rates each round.
    joint: the allocation above, from measured reports (clients without valid reports upload at
    probe_bits over their own link); equal: the baseline, fixed_bits and B / M each. fixed_bits
    None: the run's own codec (any of them) and only the rates chosen, by either policy, so fp32 or
    int8_sparse compare on the same split, and joint allocates their rates alone."""
    policy: str = "joint"
    total_uplink_mbit: float = 16.0   # B, the shared uplink the rates are cut from
    probe_bits: int = 4
    fixed_bits: int | None = 4        # policy equal's bits; None: rates only, the command's codec
    beta: float = 1.0                 # weight of the quantization variance in the round count
    smoothing: float = 0.5            # EWMA weight of the newest report
    # Fewest bits joint may choose: where beta was fitted (bench_adaptive fits it on equal:<bits> runs),
    # the model of R(q) is not known below the fitted range.
    min_bits: int = 1

    def check(self, where: str) -> None:
        from commlab.config.schema import ConfigError, positive
        if self.policy not in POLICIES:
            raise ConfigError(f"{where}policy: unknown policy {self.policy!r} (known: {', '.join(POLICIES)})")
        positive(where, total_uplink_mbit=self.total_uplink_mbit, smoothing=self.smoothing)
        if not (math.isfinite(self.beta) and self.beta >= 0):  # 0: quantization noise costs no rounds
            raise ConfigError(f"{where}beta: must be >= 0, got {self.beta}")
        if self.min_bits not in BITS:
            raise ConfigError(f"{where}min_bits: must be in 1..8, got {self.min_bits}")
        if self.smoothing > 1:
            raise ConfigError(f"{where}smoothing: must be in (0, 1], got {self.smoothing}")
        if self.probe_bits not in BITS:
            raise ConfigError(f"{where}probe_bits: must be in 1..8, got {self.probe_bits}")
        if self.fixed_bits is not None and self.fixed_bits not in BITS:
            raise ConfigError(f"{where}fixed_bits: must be in 1..8 or null (the run's codec), got {self.fixed_bits}")

    @property
    def sets_bits(self) -> bool:
        """Whether the controller chooses each client's qsgd bits (then the run's codec must be qsgd)."""
        return self.fixed_bits is not None

    @property
    def total_Bps(self) -> float:
        return self.total_uplink_mbit * 1e6 / 8
