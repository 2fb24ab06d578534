"""Privacy spent by DP-FedAvg: epsilon at delta after some rounds, from the `dp-accounting`
library (Google's maintained accountant; the optional dependency `privacy`, installed by make venv).

Each round is one Gaussian mechanism with noise multiplier z (noise std / clip norm) applied to a
sample of the clients at rate q = clients per round / clients. The rounds are composed as Poisson
sampled Gaussians, the model of DP-FedAvg's analysis (McMahan et al. 2018) and of Flower's and
TensorFlow Federated's accountants; the run itself samples exactly q * clients each round
(commlab.fl.sampling), which the Poisson model approximates.
"""
from __future__ import annotations

import logging

ACCOUNTANTS = ("rdp", "pld")


def _library():
    try:
        import dp_accounting
        from dp_accounting import pld, rdp
    except ImportError as e:
        raise RuntimeError("privacy accounting needs the dp-accounting package: pip install -e '.[privacy]' "
                           "(make venv installs it)") from e
    # The RDP accountant warns for each fractional order whose series does not converge at small
    # noise; it leaves those orders out, and epsilon is still a valid bound from the others.
    logging.getLogger("absl").setLevel(logging.ERROR)
    return dp_accounting, rdp, pld


class PrivacyLedger:
    """The rounds spent so far, composed into one accountant as they happen: epsilon after each
    round costs one composition, not the whole run's again."""

    def __init__(self, noise_multiplier: float, sampling_rate: float, delta: float, method: str = "rdp"):
        if method not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {method!r} (known: {', '.join(ACCOUNTANTS)})")
        if not 0 < sampling_rate <= 1 or not 0 < delta < 1 or noise_multiplier < 0:
            raise ValueError(f"need 0 < sampling_rate <= 1, 0 < delta < 1, noise_multiplier >= 0; got "
                             f"{sampling_rate}, {delta}, {noise_multiplier}")
        self.noise_multiplier, self.sampling_rate, self.delta, self.method = noise_multiplier, sampling_rate, delta, method
        self.rounds = 0
        self._accountant = None

    def spend(self, rounds: int = 1) -> None:
        if rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds}")
        self.rounds += rounds
        if self.noise_multiplier == 0 or rounds == 0:
            return
        dp, rdp, pld = _library()
        if self._accountant is None:
            self._accountant = rdp.RdpAccountant() if self.method == "rdp" else pld.PLDAccountant()
        round_event = dp.PoissonSampledDpEvent(self.sampling_rate, dp.GaussianDpEvent(self.noise_multiplier))
        self._accountant.compose(dp.SelfComposedDpEvent(round_event, rounds))

    def epsilon(self) -> float:
        """Epsilon at delta after the rounds spent; 0 before the first, inf without noise."""
        if self.rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return float("inf")
        return float(self._accountant.get_epsilon(self.delta))


def epsilon(noise_multiplier: float, sampling_rate: float, rounds: int, delta: float, method: str = "rdp") -> float:
    """Epsilon at `delta` after `rounds` rounds; 0 before the first, inf without noise."""
    ledger = PrivacyLedger(noise_multiplier, sampling_rate, delta, method)
    ledger.spend(rounds)
    return ledger.epsilon()
