"""The `strategy` section of controller.conf.json: which aggregation rule, its parameters, and
the server step (server lr and momentum) every rule shares (commlab.fl.strategy)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from commlab.config.schema import ConfigError, positive
from commlab.fl.strategy import ASYNC_STRATEGIES, STRATEGIES, FedAvg
from commlab.privacy.dp import DPFedAvg

if TYPE_CHECKING:
    from commlab.fl.config import ControllerConfig

# Strategy keys that only one strategy reads: key -> that strategy.
STRATEGY_OWN_KEYS = {"trim_fraction": "trimmed_mean", "clip_norm": "norm_clip", "num_malicious": "krum",
                     "keep": "krum", "root_samples": "fltrust", "root_momentum": "fltrust"}


@dataclass(frozen=True)
class StrategySection:
    # fedavg | median | trimmed_mean | norm_clip | krum | fltrust | fedbuff (commlab.fl.strategy)
    name: str = "fedavg"
    server_lr: float = 1.0
    server_momentum: float = 0.0
    trim_fraction: float | None = None   # trimmed_mean only: share cut at each end per coordinate (default 0.25)
    clip_norm: float | None = None       # norm_clip only: L2 bound of a delta (default: the round's median norm)
    num_malicious: int | None = None     # krum only: f, the attackers the score allows for (default 1)
    keep: int | None = None              # krum only: best-scored deltas averaged (default 1: Krum; > 1: Multi-Krum)
    root_samples: int | None = None      # fltrust only: training samples the server holds (default 100)
    root_momentum: float | None = None   # fltrust only: SGD momentum of its root update (default 0.9, the clients')

    def check(self, where: str) -> None:
        if self.name not in STRATEGIES and self.name not in ASYNC_STRATEGIES:
            raise ConfigError(f"{where}name: unknown strategy {self.name!r} (known: {', '.join([*STRATEGIES, *ASYNC_STRATEGIES])})")
        positive(where, server_lr=self.server_lr)
        if not 0 <= self.server_momentum < 1:
            raise ConfigError(f"{where}server_momentum: must be in [0, 1), got {self.server_momentum}")
        for key, owner in STRATEGY_OWN_KEYS.items():
            if getattr(self, key) is not None and self.name != owner:
                raise ConfigError(f"{where}{key}: only for strategy {owner}, not {self.name}")
        if self.trim_fraction is not None and not 0 <= self.trim_fraction < 0.5:
            raise ConfigError(f"{where}trim_fraction: must be in [0, 0.5), got {self.trim_fraction}")
        if self.num_malicious is not None and self.num_malicious < 0:
            raise ConfigError(f"{where}num_malicious: must be >= 0, got {self.num_malicious}")
        if self.root_momentum is not None and not 0 <= self.root_momentum < 1:
            raise ConfigError(f"{where}root_momentum: must be in [0, 1), got {self.root_momentum}")
        positive(where, **{k: getattr(self, k) for k in ("clip_norm", "keep", "root_samples")
                           if getattr(self, k) is not None})

    def params(self) -> dict[str, Any]:
        """Keyword arguments of this strategy's class beyond FedAvg's (fltrust's reference update:
        ControllerConfig.strategy_params)."""
        return {"trimmed_mean": {"trim_fraction": 0.25 if self.trim_fraction is None else self.trim_fraction},
                "norm_clip": {"clip_norm": self.clip_norm},
                "krum": {"num_malicious": 1 if self.num_malicious is None else self.num_malicious,
                         "keep": self.keep or 1}}.get(self.name, {})


def build_strategy(cfg: ControllerConfig, weights: np.ndarray) -> FedAvg:
    """The run's strategy from the model's `weights`: the config's rule, or DP-FedAvg when the
    config has a privacy section (its noise seed drawn here when the config names none)."""
    t = cfg.training
    common: dict[str, Any] = dict(epochs=t.local_epochs, lr=t.lr, batch_size=t.batch_size,
                                  subset_size=t.samples_per_round, server_lr=cfg.strategy.server_lr,
                                  server_momentum=cfg.strategy.server_momentum, lr_decay=t.lr_decay)
    if cfg.privacy is not None:
        return DPFedAvg(weights, **common, **cfg.privacy.params(cfg.expected_clients, cfg.per_round(),
                                                                cfg.privacy.seed()))
    return {**STRATEGIES, **ASYNC_STRATEGIES}[cfg.strategy.name](weights, **common, **cfg.strategy_params())
