"""The `privacy` section of controller.conf.json: client-level differential privacy of the
aggregate (commlab.privacy.dp.DPFedAvg, docs/privacy.md). Present: the run is DP-FedAvg; the
strategy must be fedavg (its server lr and momentum still apply to the noisy mean)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from commlab.config.schema import ConfigError, positive
from commlab.privacy.accountant import ACCOUNTANTS


@dataclass(frozen=True)
class PrivacySection:
    noise_multiplier: float              # z: noise std on the sum of clipped deltas / clip norm
    clip_norm: float = 1.0               # C (adaptive: its first value)
    delta: float = 1e-5                  # epsilon is reported at this delta; below 1 / expected_clients
    accountant: str = "rdp"              # rdp | pld (commlab.privacy.accountant)
    adaptive_clipping: bool = False      # move C to the target_quantile of the update norms (Andrew et al.)
    target_quantile: float = 0.5
    clip_norm_lr: float = 0.2
    clipped_count_stddev: float | None = None  # noise on the count of unclipped updates (None: per round / 20)
    noise_seed: int | None = None        # None: drawn from the OS at start and recorded in the manifest

    def check(self, where: str) -> None:
        if self.noise_multiplier < 0:
            raise ConfigError(f"{where}noise_multiplier: must be >= 0, got {self.noise_multiplier}")
        positive(where, clip_norm=self.clip_norm, clip_norm_lr=self.clip_norm_lr)
        if not 0 < self.delta < 1:
            raise ConfigError(f"{where}delta: must be in (0, 1), got {self.delta}")
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"{where}accountant: unknown {self.accountant!r} (known: {', '.join(ACCOUNTANTS)})")
        if not 0 < self.target_quantile < 1:
            raise ConfigError(f"{where}target_quantile: must be in (0, 1), got {self.target_quantile}")
        if self.clipped_count_stddev is not None:
            positive(where, clipped_count_stddev=self.clipped_count_stddev)
        adaptive_only = ("target_quantile", "clip_norm_lr", "clipped_count_stddev")
        if not self.adaptive_clipping and any(getattr(self, k) != PrivacySection.__dataclass_fields__[k].default
                                              for k in adaptive_only):
            raise ConfigError(f"{where}{', '.join(adaptive_only)}: only with adaptive_clipping true")

    def check_run(self, where: str, clients: int, per_round: int) -> None:
        """Against the run: delta below 1/clients, and an adaptive count that leaves the deltas noise."""
        if self.delta >= 1 / clients:
            raise ConfigError(f"{where}delta: {self.delta} is not below 1 / expected_clients ({1 / clients:.3g}): "
                              "it would allow one client's data to leak outright")
        stddev = self.clipped_count_stddev if self.clipped_count_stddev is not None else per_round / 20
        if self.adaptive_clipping and self.noise_multiplier >= 2 * stddev:
            raise ConfigError(f"{where}clipped_count_stddev: {stddev:g} must exceed noise_multiplier / 2 "
                              f"({self.noise_multiplier / 2:g}) for adaptive clipping")

    def params(self, clients: int, per_round: int, noise_seed: int) -> dict[str, Any]:
        """Keyword arguments of DPFedAvg beyond FedAvg's."""
        return {"noise_multiplier": self.noise_multiplier, "clip_norm": self.clip_norm, "clients": clients,
                "per_round": per_round, "delta": self.delta, "accountant": self.accountant,
                "adaptive": self.adaptive_clipping, "target_quantile": self.target_quantile,
                "clip_norm_lr": self.clip_norm_lr, "clipped_count_stddev": self.clipped_count_stddev,
                "noise_seed": noise_seed}

    def secure_params(self, clients: int, per_round: int) -> dict[str, Any]:
        """Keyword arguments of SecureDPFedAvg beyond FedAvg's (the clients clip and add the noise)."""
        return {"noise_multiplier": self.noise_multiplier, "clients": clients, "per_round": per_round,
                "delta": self.delta, "accountant": self.accountant}

    def seed(self) -> int:
        return secrets.randbits(63) if self.noise_seed is None else self.noise_seed
