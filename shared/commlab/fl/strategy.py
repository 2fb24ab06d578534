"""Round logic in the style of Flower's Strategy: configure a round, aggregate its replies.

The strategy never touches the transport: the controller hands it the results (each update as
the checked frame it came in, decoded where it is read: FitRes) and the failures (clients that
did not answer or whose update was rejected), and publishes what it returns.

FedAvg is the reference; Median, TrimmedMean, NormClip, Krum and FLTrust change only how a round's
deltas are combined (`combine`), so server lr/momentum and checkpoints work the same for all of them. FedBuff
adds a buffer of asynchronous, staleness-weighted updates (the controller runs its own loop for it).
Every strategy weighs a reply by at most the subset_size it asked for: a client cannot buy
influence by reporting more samples than it was told to train on.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from commlab.codecs import Codec


@dataclass(frozen=True)
class FitIns:
    """What every client is told to do in one round."""
    round: int
    epochs: int
    lr: float
    batch_size: int
    subset_size: int


@dataclass(frozen=True)
class Frame:
    """An update as it arrived, already checked (fl.collect decoded it once): a round's frames are
    a fraction of the model's size each where its decoded deltas would be one model each."""
    codec: Codec
    payload: bytes
    numel: int

    def decode(self) -> np.ndarray:
        return self.codec.decode(self.payload, numel=self.numel)

    def add_to(self, out: np.ndarray, weight: float) -> None:
        self.codec.add_decoded(self.payload, out, weight)


@dataclass(frozen=True)
class FitRes:
    """One client's reply: a model delta (trained - global), or the frame it is decoded from
    whenever it is read, and its sample count."""
    client_id: str
    num_samples: int
    update: np.ndarray | Frame
    staleness: int = 0  # fedbuff: server versions between the model it trained from and the one it updates

    @property
    def delta(self) -> np.ndarray:
        return self.update if isinstance(self.update, np.ndarray) else self.update.decode()

    def add_to(self, out: np.ndarray, weight: float) -> None:
        """out += weight * delta (float32); a frame is decoded straight into `out` (Codec.add_decoded)."""
        if isinstance(self.update, np.ndarray):
            out += self.update * np.float32(weight)
        else:
            self.update.add_to(out, weight)


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

    def epsilon(self) -> float | None:
        """Privacy spent so far: epsilon at the strategy's delta (commlab.privacy.dp); None: no promise."""
        return None


class FedAvg(Strategy):
    """FedAvg (McMahan et al. 2017) on deltas, weighted by num_samples, with optional server
    momentum (FedAvgM): m = beta*m + mean_delta; w += server_lr * m. beta=0, lr=1 is plain FedAvg.
    Round r's clients train at lr * lr_decay**(r - 1)."""

    def __init__(self, weights: np.ndarray, *, epochs: int, lr: float, batch_size: int,
                 subset_size: int, server_lr: float = 1.0, server_momentum: float = 0.0, lr_decay: float = 1.0):
        self.weights = np.array(weights, dtype=np.float32)  # own copy: never alias a caller's buffer
        self.momentum = np.zeros_like(self.weights)
        self.epochs, self.lr, self.batch_size, self.lr_decay = epochs, lr, batch_size, lr_decay
        self.subset_size = subset_size
        self.server_lr, self.server_momentum = server_lr, server_momentum

    def configure_round(self, rnd: int) -> FitIns:
        return FitIns(round=rnd, epochs=self.epochs, lr=self.lr * self.lr_decay ** (rnd - 1), batch_size=self.batch_size,
                      subset_size=self.subset_size)

    def aggregate(self, rnd: int, results: list[FitRes], failures: list[tuple[str, str]]) -> np.ndarray:
        if not results:
            raise ValueError(f"round {rnd}: nothing to aggregate ({len(failures)} failures)")
        for r in results:
            shape = (r.update.numel,) if isinstance(r.update, Frame) else r.update.shape
            if shape != self.weights.shape:
                raise ValueError(f"round {rnd}: {r.client_id} sent {shape}, model is {self.weights.shape}")
        # Capped at what was asked: more reported samples than subset_size buy no extra weight. In
        # client order, not arrival order: float sums depend on the order, and arrival order on the
        # links and the load, so the same updates always give the same model.
        capped = sorted((replace(r, num_samples=min(r.num_samples, self.subset_size)) for r in results),
                        key=lambda r: r.client_id)
        if sum(r.num_samples for r in capped) <= 0:
            raise ValueError(f"round {rnd}: results report {sum(r.num_samples for r in capped)} samples")
        return self.step(self.combine(capped))

    def step(self, mean: np.ndarray) -> np.ndarray:
        """The server step on the round's mean delta (also a securely aggregated one, fl.secagg_round).
        No model-sized temporary beyond the new weights: with no server momentum the mean is the
        momentum (state_dict), else the momentum is updated in place."""
        if self.server_momentum == 0:
            self.momentum = np.asarray(mean, dtype=np.float32)
        else:
            self.momentum *= np.float32(self.server_momentum)
            self.momentum += mean
        # A new array, not an in-place update: the caller may still hold the weights returned before.
        weights = self.momentum * np.float32(self.server_lr)
        weights += self.weights
        self.weights = weights
        return self.weights

    def combine(self, results: list[FitRes]) -> np.ndarray:
        """The round's delta: the mean weighted by num_samples (float32), one decoded delta at a time."""
        total = sum(r.num_samples for r in results)
        mean = np.zeros_like(self.weights)
        for r in results:
            r.add_to(mean, r.num_samples / total)
        return mean

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"momentum": self.momentum.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        momentum = np.asarray(state["momentum"], dtype=np.float32)
        if momentum.shape != self.weights.shape:
            raise ValueError(f"strategy state momentum has shape {momentum.shape}, model is {self.weights.shape}")
        self.momentum = momentum.copy()


def _stack(results: list[FitRes]) -> np.ndarray:
    return np.stack([r.delta.astype(np.float64) for r in results])


class Median(FedAvg):
    """Coordinate-wise median of the deltas (Yin et al. 2018), unweighted: any minority of
    clients, however large their updates, cannot pull a coordinate outside the honest values.
    With an even count it is the mean of the two middle values."""

    def combine(self, results: list[FitRes]) -> np.ndarray:
        return np.median(_stack(results), axis=0)


class TrimmedMean(FedAvg):
    """Coordinate-wise trimmed mean (Yin et al. 2018), unweighted: per coordinate drop the
    floor(trim_fraction * n) largest and as many smallest values, average the rest. With
    trim_fraction * n < 1 nothing is trimmed (plain unweighted mean); 4 clients need >= 0.25."""

    def __init__(self, weights: np.ndarray, *, trim_fraction: float = 0.25, **kw):
        if not 0 <= trim_fraction < 0.5:
            raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction}")
        super().__init__(weights, **kw)
        self.trim_fraction = trim_fraction

    def combine(self, results: list[FitRes]) -> np.ndarray:
        k = int(self.trim_fraction * len(results))
        ordered = np.sort(_stack(results), axis=0)
        return ordered[k:len(results) - k].mean(axis=0)


class NormClip(FedAvg):
    """FedAvg of deltas clipped to L2 norm clip_norm (Sun et al. 2019, "Can you really backdoor
    FL?"); clip_norm=None clips to the median norm of the round's deltas, so no scale is needed
    in advance. Bounds a scaled update's pull, not its direction: a flipped update still subtracts."""

    def __init__(self, weights: np.ndarray, *, clip_norm: float | None = None, **kw):
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
        super().__init__(weights, **kw)
        self.clip_norm = clip_norm

    def combine(self, results: list[FitRes]) -> np.ndarray:
        norms = [float(np.linalg.norm(r.delta.astype(np.float64))) for r in results]
        bound = self.clip_norm if self.clip_norm is not None else float(np.median(norms))
        clipped = [FitRes(r.client_id, r.num_samples, r.delta * np.float32(min(1.0, bound / n) if n > 0 else 1.0))
                   for r, n in zip(results, norms)]
        return super().combine(clipped)


class Krum(FedAvg):
    """Krum and Multi-Krum (Blanchard et al. 2017): a delta's score is the sum of its squared L2
    distances to its n - f - 2 nearest other deltas (f = num_malicious); the `keep` best-scored
    deltas are averaged like FedAvg (keep=1: Krum, the single best one). The guarantee needs
    n >= 2f + 3; below that the score still uses at least one neighbour (as Flower's Krum does),
    so an outlier far from every other delta still scores worst. Ties go to the client first in
    client order, so the same updates always select the same clients."""

    def __init__(self, weights: np.ndarray, *, num_malicious: int = 1, keep: int = 1, **kw):
        if num_malicious < 0 or keep < 1:
            raise ValueError(f"need num_malicious >= 0 and keep >= 1, got {num_malicious}, {keep}")
        super().__init__(weights, **kw)
        self.num_malicious, self.keep = num_malicious, keep

    def scores(self, results: list[FitRes]) -> np.ndarray:
        deltas = _stack(results)
        n = len(results)
        squared = np.full((n, n), np.inf)  # a delta is not its own neighbour
        for i in range(n):
            for j in range(i + 1, n):
                squared[i, j] = squared[j, i] = float(np.sum((deltas[i] - deltas[j]) ** 2))
        neighbours = min(n - 1, max(1, n - self.num_malicious - 2))
        return np.sort(squared, axis=1)[:, :neighbours].sum(axis=1)

    def combine(self, results: list[FitRes]) -> np.ndarray:
        if len(results) == 1:
            return super().combine(results)
        best = np.argsort(self.scores(results), kind="stable")[:self.keep]
        return super().combine([results[i] for i in sorted(best)])


class FLTrust(FedAvg):
    """FLTrust (Cao et al. 2021): the server trains its own update from the global weights on a
    small clean root set it holds (`reference`), scores each delta by ReLU(cosine) to it, rescales
    every delta to the reference's norm and averages them weighted by their scores. A delta that
    points away from the reference counts 0 however large it is, and none pulls harder than the
    reference: no honest majority is needed, only a root set that is clean and drawn like the
    clients' data (commlab.fl.root_update). Scores, not num_samples, weigh the deltas; with no
    positive score the round's delta is zero."""

    def __init__(self, weights: np.ndarray, *, reference: Callable[[np.ndarray, FitIns], np.ndarray], **kw):
        super().__init__(weights, **kw)
        self.reference = reference
        self.fit = self.configure_round(1)  # the round being aggregated: set by aggregate, read by combine

    def aggregate(self, rnd: int, results: list[FitRes], failures: list[tuple[str, str]]) -> np.ndarray:
        self.fit = self.configure_round(rnd)  # the reference trains like the round's clients
        return super().aggregate(rnd, results, failures)

    def combine(self, results: list[FitRes]) -> np.ndarray:
        reference = self.reference(self.weights, self.fit).astype(np.float64)
        reference_norm = float(np.linalg.norm(reference))
        total = np.zeros_like(reference)
        score_sum = 0.0
        for r in results:
            delta = r.delta.astype(np.float64)
            norm = float(np.linalg.norm(delta))
            if norm == 0 or reference_norm == 0:
                continue
            score = max(0.0, float(delta @ reference) / (norm * reference_norm))
            total += (score * reference_norm / norm) * delta
            score_sum += score
        return total / score_sum if score_sum > 0 else total


def staleness_weight(staleness: int) -> float:
    """FedBuff's polynomial staleness scaling s(tau) = 1/sqrt(1 + tau) (Nguyen et al. 2022, a = 0.5):
    an update computed on an older model still helps, but less."""
    return 1.0 / math.sqrt(1.0 + staleness)


class FedBuff(FedAvg):
    """Buffered asynchronous aggregation (FedBuff, Nguyen et al. 2022). Updates arrive one at a
    time against whatever server version their client trained from; `offer` buffers them, refusing
    any staler than max_staleness, and once buffer_size are in, the controller aggregates them as
    one server step (a "round" is one server model version). Each delta counts with FedAvg's sample
    weight times staleness_weight, not renormalised: stale updates move the model less, as in the
    paper's sum of s(tau) * delta. All staleness 0 is exactly FedAvg. Buffered updates live in
    memory only: a restarted controller starts with an empty buffer (clients retrain)."""

    def __init__(self, weights: np.ndarray, *, buffer_size: int = 2, max_staleness: int = 10, **kw):
        if buffer_size < 1 or max_staleness < 0:
            raise ValueError(f"need buffer_size >= 1 and max_staleness >= 0, got {buffer_size}, {max_staleness}")
        super().__init__(weights, **kw)
        self.buffer_size, self.max_staleness = buffer_size, max_staleness
        self.buffer: list[FitRes] = []
        self.failures: list[tuple[str, str]] = []  # (client, reason) refused since the last take()

    def offer(self, res: FitRes, version: int, base: int) -> str | None:
        """Buffer `res`, trained from server version `base` while the server is at `version`;
        returns why it was refused (and records it in failures), or None."""
        staleness = version - base
        if staleness < 0:
            reason = f"trained from version {base}, newer than the server's {version}"
        elif staleness > self.max_staleness:
            reason = f"staleness {staleness} > max_staleness {self.max_staleness} (trained from version {base})"
        else:
            self.buffer.append(replace(res, staleness=staleness))
            return None
        self.failures.append((res.client_id, reason))
        return reason

    def full(self) -> bool:
        return len(self.buffer) >= self.buffer_size

    def take(self) -> tuple[list[FitRes], list[tuple[str, str]]]:
        """The buffered results (client order, then staleness: sums must not depend on arrival
        order) and the refusals since the last take; both start empty again."""
        results = sorted(self.buffer, key=lambda r: (r.client_id, r.staleness))
        failures, self.buffer, self.failures = self.failures, [], []
        return results, failures

    def combine(self, results: list[FitRes]) -> np.ndarray:
        total = sum(r.num_samples for r in results)
        step = np.zeros_like(self.weights, dtype=np.float64)
        for r in results:
            step += (r.num_samples / total) * staleness_weight(r.staleness) * r.delta.astype(np.float64)
        return step


# Config `strategy.name` -> class; every one takes FedAvg's arguments plus its own (StrategySection.params).
STRATEGIES: dict[str, type[FedAvg]] = {"fedavg": FedAvg, "median": Median, "trimmed_mean": TrimmedMean,
                                       "norm_clip": NormClip, "krum": Krum, "fltrust": FLTrust}
# The same for strategies the controller runs asynchronously (Controller.run_version).
ASYNC_STRATEGIES: dict[str, type[FedAvg]] = {"fedbuff": FedBuff}
