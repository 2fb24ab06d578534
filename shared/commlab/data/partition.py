"""Client partitions of a dataset's training samples.

iid; label skew: dirichlet(alpha), shards(labels_per_client), label_quantity(labels_per_client);
quantity skew: quantity(exponent), a power law of sample counts; natural: the dataset's own writers
or speaking roles (LEAF's FEMNIST and Shakespeare split).

Each scheme returns one sorted int64 index array per client and is a pure function of
(labels, num_clients, seed, params; natural: each sample's group), so every node can recompute its
own share from the config.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .dataset import Dataset

Partitioner = Callable[..., list[np.ndarray]]
LABEL_SCHEMES = ("dirichlet", "shards", "label_quantity")  # these need one class label a sample


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


def _check_labels_per_client(classes: np.ndarray, labels_per_client: int) -> None:
    if not 1 <= labels_per_client <= len(classes):
        raise ValueError(f"labels_per_client must be in 1..{len(classes)}, got {labels_per_client}")


def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
           labels_per_client: int = 2) -> list[np.ndarray]:
    """Client i holds exactly labels_per_client labels: consecutive runs of a seeded label order,
    so labels are spread evenly; each label's samples are split evenly among its holders."""
    classes = np.unique(labels)
    _check_labels_per_client(classes, labels_per_client)
    order = rng.permutation(classes)
    owned = [order[(i * labels_per_client + np.arange(labels_per_client)) % len(classes)]
             for i in range(num_clients)]
    return _split_among_holders(labels, classes, owned, rng)


def label_quantity(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                   labels_per_client: int = 2) -> list[np.ndarray]:
    """NIID-Bench's quantity-based label imbalance (#C=k): client i holds label i mod classes and
    labels_per_client - 1 others drawn at random, so some labels have many holders and others few
    (shards spreads them evenly); each label's samples are split evenly among its holders."""
    classes = np.unique(labels)
    _check_labels_per_client(classes, labels_per_client)
    owned = []
    for i in range(num_clients):
        first = classes[i % len(classes)]
        others = rng.choice(classes[classes != first], size=labels_per_client - 1, replace=False)
        owned.append(np.concatenate([[first], others]))
    return _split_among_holders(labels, classes, owned, rng)


def _split_among_holders(labels: np.ndarray, classes: np.ndarray, owned: list[np.ndarray],
                         rng: np.random.Generator) -> list[np.ndarray]:
    """Each label's samples, shuffled, in near-equal parts to the clients that own the label."""
    num_clients = len(owned)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in classes:
        holders = [i for i, own in enumerate(owned) if c in own]
        idx = rng.permutation(np.flatnonzero(labels == c))
        if holders and len(idx) < len(holders):
            raise ValueError(f"label {c} has {len(idx)} samples for {len(holders)} clients")
        for client, piece in zip(holders, np.array_split(idx, len(holders)) if holders else []):
            parts[client].append(piece)
    return [np.concatenate(p) for p in parts]


def quantity(labels: np.ndarray, num_clients: int, rng: np.random.Generator, exponent: float = 1.0,
             min_size: int = 10) -> list[np.ndarray]:
    """Quantity skew: the k-th largest client holds a share proportional to k^-exponent (Zipf's
    power law; 0 gives equal shares) on top of min_size samples each; which client is k-th is
    seeded; samples are drawn iid, so label proportions stay those of the whole set."""
    if exponent < 0:
        raise ValueError(f"quantity exponent must be >= 0, got {exponent}")
    if num_clients * min_size > len(labels):
        raise ValueError(f"{len(labels)} samples cannot give {num_clients} clients {min_size} each")
    shares = rng.permutation(np.arange(1, num_clients + 1, dtype=np.float64) ** -exponent)
    sizes = min_size + np.floor(shares / shares.sum() * (len(labels) - num_clients * min_size)).astype(np.int64)
    sizes[np.argmax(shares)] += len(labels) - sizes.sum()  # the rounding remainder: every sample is used
    return np.split(rng.permutation(len(labels)), np.cumsum(sizes)[:-1])


def natural(labels: np.ndarray, num_clients: int, rng: np.random.Generator, groups: np.ndarray) -> list[np.ndarray]:
    """The dataset's own split: with as many clients as writers (roles), client i is the i-th one in
    the dataset's order; with fewer, every client holds whole writers, a seeded deal of near-equal
    counts of them."""
    ids = np.unique(groups)
    if num_clients > len(ids):
        raise ValueError(f"natural: the dataset has {len(ids)} writers or roles, fewer than {num_clients} clients")
    dealt = ids if num_clients == len(ids) else rng.permutation(ids)
    client_of = np.zeros(int(ids.max()) + 1, np.int64)
    for client, piece in enumerate(np.array_split(dealt, num_clients)):
        client_of[piece] = client
    owner = client_of[groups]
    return np.split(np.argsort(owner, kind="stable"), np.cumsum(np.bincount(owner, minlength=num_clients))[:-1])


SCHEMES: dict[str, Partitioner] = {"iid": iid, "dirichlet": dirichlet, "shards": shards,
                                   "label_quantity": label_quantity, "quantity": quantity, "natural": natural}


def partition(labels: np.ndarray, num_clients: int, scheme: str, seed: int, groups: np.ndarray | None = None,
              **params) -> list[np.ndarray]:
    """Index arrays (sorted, int64), one per client, for the named scheme; `groups` (each
    sample's writer or role) is what natural splits by."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown partition scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    labels = np.asarray(labels)
    if num_clients < 1 or num_clients > len(labels):
        raise ValueError(f"num_clients must be in 1..{len(labels)}, got {num_clients}")
    if scheme in LABEL_SCHEMES and labels.ndim != 1:
        raise ValueError(f"partition {scheme} needs one class label a sample; these samples have {labels.shape[1:]} "
                         "targets each (a language model): use iid or quantity")
    if scheme == "natural":
        if groups is None:
            raise ValueError("partition natural needs a dataset of writers or roles (femnist, shakespeare)")
        params["groups"] = np.asarray(groups)
    parts = SCHEMES[scheme](labels, num_clients, np.random.default_rng(seed), **params)
    return [np.sort(p).astype(np.int64) for p in parts]


def scheme_params(scheme: str, *, alpha: float, labels_per_client: int, exponent: float) -> dict[str, float]:
    """The keyword arguments `scheme` takes, from the settings every scheme's config carries."""
    return {"dirichlet": {"alpha": alpha}, "shards": {"labels_per_client": labels_per_client},
            "label_quantity": {"labels_per_client": labels_per_client}, "quantity": {"exponent": exponent}
            }.get(scheme, {})


def partition_dataset(ds: Dataset, num_clients: int, scheme: str, seed: int, **params) -> list[np.ndarray]:
    """partition() of a dataset's training samples, by their labels or (natural) their writers or roles."""
    return partition(ds.train_y, num_clients, scheme, seed, groups=ds.train_groups, **params)


def client_summary(ds: Dataset, parts: list[np.ndarray]) -> list[dict]:
    """Each client's sample count and, for class labels, its label histogram (the run manifest's record)."""
    hist = label_histogram(ds.train_y, parts, ds.num_classes) if ds.train_y.ndim == 1 else None
    return [{"samples": int(len(p)), **({} if hist is None else {"label_histogram": hist[i].tolist()})}
            for i, p in enumerate(parts)]


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
