"""Round logic in the style of Flower's Strategy: configure a round, aggregate its replies.

The strategy never touches the transport: the controller hands it decoded results and the
failures (clients that did not answer or whose update was rejected), and publishes what it returns.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FitIns:
    """What every client is told to do in one round."""
    round: int
    epochs: int
    lr: float
    batch_size: int
    subset_size: int
    seed: int


@dataclass(frozen=True)
class FitRes:
    """One client's decoded reply: a model delta (trained - global) and its sample count."""
    client_id: str
    num_samples: int
    delta: np.ndarray


class Strategy(ABC):
    """Owns the global weights; `aggregate` turns a round's results into the next weights."""

    weights: np.ndarray

    @abstractmethod
    def configure_round(self, rnd: int) -> FitIns: ...

    @abstractmethod
    def aggregate(self, rnd: int, results: list[FitRes], failures: list[tuple[str, str]]) -> np.ndarray: ...

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


class FedAvg(Strategy):
    """FedAvg (McMahan et al. 2017) on deltas, weighted by num_samples, with optional server
    momentum (FedAvgM): m = beta*m + mean_delta; w += server_lr * m. beta=0, lr=1 is plain FedAvg."""

    def __init__(self, weights: np.ndarray, *, epochs: int, lr: float, batch_size: int,
                 subset_size: int, seed: int, server_lr: float = 1.0, server_momentum: float = 0.0):
        self.weights = np.array(weights, dtype=np.float32)  # own copy: never alias a caller's buffer
        self.momentum = np.zeros_like(self.weights)
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.subset_size, self.seed = subset_size, seed
        self.server_lr, self.server_momentum = server_lr, server_momentum

    def configure_round(self, rnd: int) -> FitIns:
        # The per-round seed makes each round's client subsets reproducible and distinct.
        return FitIns(round=rnd, epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                      subset_size=self.subset_size, seed=self.seed * 100_003 + rnd)

    def aggregate(self, rnd: int, results: list[FitRes], failures: list[tuple[str, str]]) -> np.ndarray:
        if not results:
            raise ValueError(f"round {rnd}: nothing to aggregate ({len(failures)} failures)")
        total = sum(r.num_samples for r in results)
        if total <= 0:
            raise ValueError(f"round {rnd}: results report {total} samples")
        mean = np.zeros_like(self.weights, dtype=np.float64)
        for r in results:
            if r.delta.shape != self.weights.shape:
                raise ValueError(f"round {rnd}: {r.client_id} sent {r.delta.shape}, model is {self.weights.shape}")
            mean += (r.num_samples / total) * r.delta.astype(np.float64)
        self.momentum = (self.server_momentum * self.momentum + mean).astype(np.float32)
        # A new array, not an in-place update: a previous ModelBlob may still reference the old one.
        self.weights = (self.weights + np.float32(self.server_lr) * self.momentum).astype(np.float32)
        return self.weights

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"momentum": self.momentum.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        momentum = np.asarray(state["momentum"], dtype=np.float32)
        if momentum.shape != self.weights.shape:
            raise ValueError(f"strategy state momentum has shape {momentum.shape}, model is {self.weights.shape}")
        self.momentum = momentum.copy()
