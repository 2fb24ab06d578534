"""Client partitions of a label vector: iid, dirichlet(alpha), shards(labels_per_client).

Each scheme returns one sorted int64 index array per client and is a pure function of
(labels, num_clients, seed, params), so every node can recompute its own share from the config.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Partitioner = Callable[..., list[np.ndarray]]


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random permutation cut into num_clients near-equal parts."""
    return np.array_split(rng.permutation(len(labels)), num_clients)


def dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              alpha: float = 0.5, min_size: int = 10, max_tries: int = 1000) -> list[np.ndarray]:
    """Per class, client shares drawn from Dir(alpha) (NIID-Bench); redrawn until every client
    holds at least min_size samples, as an empty client cannot train."""
    if alpha <= 0:
        raise ValueError(f"dirichlet alpha must be > 0, got {alpha}")
    if num_clients * min_size > len(labels):
        raise ValueError(f"{len(labels)} samples cannot give {num_clients} clients {min_size} each")
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1] * len(idx)).astype(int)
            for client, piece in enumerate(np.split(idx, cuts)):
                parts[client].append(piece)
        merged = [np.concatenate(p) for p in parts]
        if min(len(p) for p in merged) >= min_size:
            return merged
    raise ValueError(f"dirichlet(alpha={alpha}) left a client below {min_size} samples after "
                     f"{max_tries} draws; raise alpha or lower min_size")


def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
           labels_per_client: int = 2) -> list[np.ndarray]:
    """Client i holds exactly labels_per_client labels: consecutive runs of a seeded label order,
    so labels are spread evenly; each label's samples are split evenly among its holders."""
    classes = np.unique(labels)
    if not 1 <= labels_per_client <= len(classes):
        raise ValueError(f"labels_per_client must be in 1..{len(classes)}, got {labels_per_client}")
    order = rng.permutation(classes)
    owned = [order[(i * labels_per_client + np.arange(labels_per_client)) % len(classes)]
             for i in range(num_clients)]
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in classes:
        holders = [i for i, own in enumerate(owned) if c in own]
        idx = rng.permutation(np.flatnonzero(labels == c))
        if holders and len(idx) < len(holders):
            raise ValueError(f"label {c} has {len(idx)} samples for {len(holders)} clients")
        for client, piece in zip(holders, np.array_split(idx, len(holders)) if holders else []):
            parts[client].append(piece)
    return [np.concatenate(p) for p in parts]


SCHEMES: dict[str, Partitioner] = {"iid": iid, "dirichlet": dirichlet, "shards": shards}


def partition(labels: np.ndarray, num_clients: int, scheme: str, seed: int, **params) -> list[np.ndarray]:
    """Index arrays (sorted, int64), one per client, for the named scheme."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown partition scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    labels = np.asarray(labels)
    if num_clients < 1 or num_clients > len(labels):
        raise ValueError(f"num_clients must be in 1..{len(labels)}, got {num_clients}")
    parts = SCHEMES[scheme](labels, num_clients, np.random.default_rng(seed), **params)
    return [np.sort(p).astype(np.int64) for p in parts]


def label_histogram(labels: np.ndarray, parts: list[np.ndarray], num_classes: int | None = None) -> np.ndarray:
    """Samples per (client, class), shape (clients, classes)."""
    labels = np.asarray(labels)
    k = num_classes if num_classes is not None else int(labels.max()) + 1
    return np.stack([np.bincount(labels[p], minlength=k) for p in parts])


def format_histogram(hist: np.ndarray) -> str:
    """Plain-text table: one row a client, one column a class, with row and column totals."""
    width = max(5, len(str(int(hist.sum()))) + 1)
    head = "client" + "".join(f"{c:>{width}}" for c in range(hist.shape[1])) + f"{'total':>{width + 1}}"
    rows = [f"{i:>6}" + "".join(f"{v:>{width}}" for v in row) + f"{row.sum():>{width + 1}}"
            for i, row in enumerate(hist)]
    total = f"{'total':>6}" + "".join(f"{v:>{width}}" for v in hist.sum(0)) + f"{hist.sum():>{width + 1}}"
    return "\n".join([head, *rows, total])
