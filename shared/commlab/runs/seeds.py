"""The seed tree of a run: every random stream of an FL or DDP run, derived here and nowhere else.

A run has two roots: `seed` (the run seed) and `data_seed` (which samples form the data subsets
and how the training set is split between nodes; by default the run seed). Each named stream is a
child of one root in numpy's SeedSequence tree, at a fixed spawn key (ROOTS[root], STREAMS key), so
adding a stream never moves another, and the two roots' streams differ even when both seeds are equal. A stream per node (a client's codec, a rank's batch order) is the child at
(key, node); the seeds that change every round or epoch are children of that node seed, so the
node seeds recorded in the manifest (`SeedTree.manifest`) are the true roots of what each node drew.

Seeds are 32-bit integers: what every consumer takes (numpy Generators, torch.manual_seed,
PowerSGD's RandomState in the gloo peer) and what JSON holds exactly.

    tree = SeedTree(seed=0, data_seed=1)
    tree.partition             # the clients' shares: changes with data_seed only
    tree.model_init            # the initial weights: changes with seed only
    tree.local(client, rnd).shuffle(epoch)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

DATA, RUN = "data_seed", "seed"
ROOTS = {RUN: 0, DATA: 1}  # the first element of every spawn key

# stream -> (root, spawn key). Keys are fixed forever: a run recorded with a key must draw the same.
STREAMS: dict[str, tuple[str, int]] = {
    "subset": (DATA, 0),          # the random train/test subsets (dataset.train_subset, test_subset)
    "partition": (DATA, 1),       # the clients' shares, the DDP ranks' shards
    "root_set": (DATA, 2),        # FLTrust: the training samples the server holds
    "model_init": (RUN, 0),       # the initial weights, the same on every node
    "sampling": (RUN, 1),         # FL: which clients train a round; child per round
    "local_training": (RUN, 2),   # FL: per client; its round subset, torch RNG and batch orders per round
    "codec": (RUN, 3),            # per node (FL client index, DDP rank): its compressor's draws
    "codec_shared": (RUN, 4),     # the same on every node: PowerSGD's first Qs must agree
    "batches": (RUN, 5),          # DDP: per rank; its batch order per epoch
    "evaluation": (RUN, 6),       # FL batchnorm "local": the controller's calibration samples
    "server_training": (RUN, 7),  # FLTrust: the server's own update, trained like a client's
    "controller_codec": (RUN, 8),  # FL: the controller's compressor of the model broadcast
}
# The streams with a seed per node (the child at the node's index), the others one per run.
PER_NODE = ("local_training", "codec", "batches")


def check_seed(where: str, name: str, value: int | None) -> str | None:
    """Why `value` cannot be a root seed, or None: SeedSequence takes non-negative integers."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        return f"{where}{name}: must be an integer >= 0, got {value!r}"
    return None


def _draw(entropy: int, *spawn_key: int) -> int:
    return int(np.random.SeedSequence(entropy, spawn_key=spawn_key).generate_state(1, np.uint32)[0])


@dataclass(frozen=True)
class TrainingSeeds:
    """One node's seeds for one round of local training (children of its node seed)."""
    root: int

    @property
    def subset(self) -> int:
        """Which samples of the node's partition it trains on this round."""
        return _draw(self.root, 0)

    @property
    def torch(self) -> int:
        """torch's global RNG while training (dropout and any other torch draw)."""
        return _draw(self.root, 1)

    def shuffle(self, epoch: int) -> int:
        """The batch order of one local epoch."""
        return _draw(self.root, 2, epoch)


@dataclass(frozen=True)
class SeedTree:
    seed: int = 0
    data_seed: int | None = None  # None: the run seed

    def __post_init__(self) -> None:
        problem = check_seed("", RUN, self.seed) or check_seed("", DATA, self.data_seed)
        if problem:
            raise ValueError(problem)

    def stream(self, name: str, *path: int) -> int:
        """The seed of stream `name` (STREAMS), at `path` below it (a node index, a round...)."""
        if name not in STREAMS:
            raise KeyError(f"unknown seed stream {name!r} (known: {', '.join(STREAMS)})")
        root, key = STREAMS[name]
        entropy = self.seed if root == RUN or self.data_seed is None else self.data_seed
        return _draw(entropy, ROOTS[root], key, *path)

    @property
    def subset(self) -> int:
        return self.stream("subset")

    @property
    def partition(self) -> int:
        return self.stream("partition")

    @property
    def root_set(self) -> int:
        return self.stream("root_set")

    @property
    def model_init(self) -> int:
        return self.stream("model_init")

    @property
    def codec_shared(self) -> int:
        return self.stream("codec_shared")

    @property
    def evaluation(self) -> int:
        return self.stream("evaluation")

    @property
    def controller_codec(self) -> int:
        return self.stream("controller_codec")

    def sampling(self, rnd: int) -> int:
        """Which clients train round `rnd` (a fedbuff dispatch: server version + 1)."""
        return _draw(self.stream("sampling"), rnd)

    def codec(self, node: int) -> int:
        return self.stream("codec", node)

    def local(self, client: int, rnd: int) -> TrainingSeeds:
        return TrainingSeeds(_draw(self.stream("local_training", client), rnd))

    def server_training(self, rnd: int) -> TrainingSeeds:
        return TrainingSeeds(_draw(self.stream("server_training"), rnd))

    def batches(self, rank: int, epoch: int) -> int:
        """A DDP rank's batch order in `epoch`."""
        return _draw(self.stream("batches", rank), epoch)

    def manifest(self, nodes: int, per_node: tuple[str, ...]) -> dict[str, Any]:
        """The roots and every named seed of a run of `nodes` nodes, for the run manifest: the
        run-wide streams by name, and the run's `per_node` streams (of PER_NODE) as one list of
        node seeds each (rounds and epochs draw from children of these, as above)."""
        return {RUN: self.seed, DATA: self.seed if self.data_seed is None else self.data_seed,
                **{name: self.stream(name) for name in STREAMS if name not in PER_NODE},
                **{name: [self.stream(name, node) for node in range(nodes)] for name in per_node}}
