"""DP-FedAvg (McMahan et al. 2018) with fixed or adaptive clipping (Andrew et al. 2021), the
model of Flower's DifferentialPrivacyServerSide{Fixed,Adaptive}Clipping: client-level
differential privacy against anyone who sees the models the controller publishes.

Each round, every client delta is clipped to L2 norm C, the clipped deltas are summed, Gaussian
noise of std z * C is added to the sum, and the sum is divided by the number of clients the round
asked (a fixed denominator: the mean of the clients that answered would make its scale depend on
who answered). One client changes the sum by at most C, so each round is a Gaussian mechanism
with noise multiplier z; the accountant (commlab.privacy.accountant) composes the rounds.

Adaptive clipping moves C towards the target_quantile of the update norms: each client counts 1
if its norm is at most C, the count gets Gaussian noise of std clipped_count_stddev, and
C <- C * exp(-clip_norm_lr * (noisy share - target_quantile)). The count is private too, so the
deltas get the smaller multiplier z_delta = (z^-2 - (2 * clipped_count_stddev)^-2)^-1/2 and both
releases together cost what one Gaussian mechanism of multiplier z costs.

DPFedAvg's controller clips and adds the noise: it must be trusted with the raw updates. With
secure aggregation the clients clip and add the noise themselves (commlab.privacy.field, Skellam
noise on the field grid) and the controller only applies the server step to the noisy sum and
counts the rounds (SecureDPFedAvg).
"""
from __future__ import annotations

import math

import numpy as np

from commlab.fl.strategy import FedAvg, FitRes
from commlab.privacy.accountant import PrivacyLedger


def clip(delta: np.ndarray, bound: float) -> tuple[np.ndarray, bool]:
    """`delta` scaled to L2 norm at most `bound` (float64), and whether it was within it already."""
    d = delta.astype(np.float64)
    norm = float(np.linalg.norm(d))
    return (d, True) if norm <= bound else (d * (bound / norm), False)


def delta_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float | None) -> float:
    """The multiplier left for the deltas when the clipped count takes its share (None: no count)."""
    if clipped_count_stddev is None or noise_multiplier == 0:
        return noise_multiplier
    if noise_multiplier >= 2 * clipped_count_stddev:
        raise ValueError(f"noise_multiplier {noise_multiplier} must be below 2 * clipped_count_stddev "
                         f"({2 * clipped_count_stddev}): the clipped count would use the whole budget")
    return (noise_multiplier ** -2 - (2 * clipped_count_stddev) ** -2) ** -0.5


class DPFedAvg(FedAvg):
    """FedAvg on clipped deltas with Gaussian noise on their sum; `epsilon()` is the privacy spent
    by the rounds aggregated so far. Unweighted: a client's influence is bounded by C alone."""

    def __init__(self, weights: np.ndarray, *, noise_multiplier: float, clip_norm: float, clients: int,
                 per_round: int, delta: float, accountant: str = "rdp", adaptive: bool = False,
                 target_quantile: float = 0.5, clip_norm_lr: float = 0.2,
                 clipped_count_stddev: float | None = None, noise_seed: int = 0, **kw):
        if not clip_norm > 0 or noise_multiplier < 0 or not 1 <= per_round <= clients:
            raise ValueError(f"need clip_norm > 0, noise_multiplier >= 0, 1 <= per_round <= clients; got "
                             f"{clip_norm}, {noise_multiplier}, {per_round}, {clients}")
        super().__init__(weights, **kw)
        self.noise_multiplier, self.clip_norm, self.per_round = noise_multiplier, clip_norm, per_round
        self.sampling_rate = per_round / clients
        self.ledger = PrivacyLedger(noise_multiplier, self.sampling_rate, delta, accountant)
        self.adaptive, self.target_quantile, self.clip_norm_lr = adaptive, target_quantile, clip_norm_lr
        # Flower's and TFF's default: the count's noise is a twentieth of the clients per round.
        self.count_stddev = (per_round / 20 if clipped_count_stddev is None else clipped_count_stddev) if adaptive else None
        self.delta_multiplier = delta_noise_multiplier(noise_multiplier, self.count_stddev)
        self.noise_seed = noise_seed
        self.rng = np.random.default_rng([noise_seed, 0])  # aggregate() reseeds it each round

    def aggregate(self, rnd: int, results: list[FitRes], failures: list[tuple[str, str]]) -> np.ndarray:
        # Noise drawn from (seed, round): a resumed run draws what the uninterrupted one would.
        self.rng = np.random.default_rng([self.noise_seed, rnd])
        weights = super().aggregate(rnd, results, failures)
        self.ledger.spend()  # a round nobody trained in is never aggregated, and costs nothing
        return weights

    def combine(self, results: list[FitRes]) -> np.ndarray:
        bound = self.clip_norm
        total = np.zeros_like(self.weights, dtype=np.float64)
        within = 0
        for r in results:
            clipped, inside = clip(r.delta, bound)
            total += clipped
            within += inside
        total += self.rng.normal(0.0, self.delta_multiplier * bound, size=total.shape)
        if self.adaptive:
            share = (within + self.rng.normal(0.0, self.count_stddev)) / self.per_round
            self.clip_norm = bound * math.exp(-self.clip_norm_lr * (share - self.target_quantile))
        return total / self.per_round

    def epsilon(self) -> float | None:
        return self.ledger.epsilon()

    def state_dict(self) -> dict[str, np.ndarray]:
        return {**super().state_dict(), "clip_norm": np.array(self.clip_norm),
                "rounds_spent": np.array(self.ledger.rounds)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        for key in ("clip_norm", "rounds_spent"):
            if key not in state or np.asarray(state[key]).shape != ():
                raise ValueError(f"strategy state lacks the scalar {key} of a dp_fedavg run")
        clip_norm, spent = float(state["clip_norm"]), int(state["rounds_spent"])
        if not clip_norm > 0 or spent < 0:
            raise ValueError(f"strategy state has clip_norm {clip_norm}, rounds_spent {spent}")
        self.clip_norm = clip_norm
        self.ledger = PrivacyLedger(self.noise_multiplier, self.sampling_rate, self.ledger.delta, self.ledger.method)
        self.ledger.spend(spent)


class SecureDPFedAvg(FedAvg):
    """DP-FedAvg under secure aggregation (docs/privacy.md): the clients clip and add the noise, the
    controller gets the noisy sum (fl.secagg_round), divides it by the clients the round asked and
    applies FedAvg's server step; `epsilon()` composes the rounds stepped so far as DPFedAvg's."""

    def __init__(self, weights: np.ndarray, *, noise_multiplier: float, clients: int, per_round: int,
                 delta: float, accountant: str = "rdp", **kw):
        super().__init__(weights, **kw)
        self.ledger = PrivacyLedger(noise_multiplier, per_round / clients, delta, accountant)

    def step(self, mean: np.ndarray) -> np.ndarray:
        self.ledger.spend()
        return super().step(mean)

    def epsilon(self) -> float | None:
        return self.ledger.epsilon()

    def state_dict(self) -> dict[str, np.ndarray]:
        return {**super().state_dict(), "rounds_spent": np.array(self.ledger.rounds)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        spent = np.asarray(state.get("rounds_spent", -1))
        if spent.shape != () or int(spent) < 0:
            raise ValueError("strategy state lacks the rounds_spent of a DP run under secure aggregation")
        led = self.ledger
        self.ledger = PrivacyLedger(led.noise_multiplier, led.sampling_rate, led.delta, led.method)
        self.ledger.spend(int(spent))
