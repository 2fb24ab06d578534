"""The FL launcher's training defaults, per dataset, in one place: what `python -m commlab.fl.run`
uses for a flag not given on its command line. The Flower peer (commlab.peers.flower_run) takes the
clients' ones from here too; its server is Flower's FedAvg, without server_lr and server_momentum.

A dataset without an entry in BY_DATASET trains with the config's own defaults (BASE: 1 local epoch
of batch 64 at lr 0.05, SGD momentum 0.9, 6000 samples per client and round, plain FedAvg). An
entry overrides some of them for that dataset; each was chosen by measurement with
`make bench-fl-schedule DATASET=<name>` (benchmarks/bench_fl_schedule.py, docs/workloads.md).
"""
from __future__ import annotations

import argparse
from typing import Any

from commlab.fl.config import OptimizerSection, TrainingSection
from commlab.fl.strategy_config import StrategySection

_TRAINING, _OPTIMIZER, _STRATEGY = TrainingSection(), OptimizerSection(), StrategySection()
# Launcher flag (its argparse dest) -> the config's default.
BASE: dict[str, Any] = {"epochs": _TRAINING.local_epochs, "batch_size": _TRAINING.batch_size, "lr": _TRAINING.lr,
                        "lr_decay": _TRAINING.lr_decay, "samples_per_round": _TRAINING.samples_per_round,
                        "momentum": _OPTIMIZER.momentum, "server_lr": _STRATEGY.server_lr,
                        "server_momentum": _STRATEGY.server_momentum}

BY_DATASET: dict[str, dict[str, Any]] = {
    # Fashion-MNIST, 2 clients, Dirichlet(0.5): with BASE the accuracy wavers from round to round near
    # the end (non-IID client drift); FedAvgM carries the earlier rounds' progress and the decaying lr
    # shrinks the late rounds' steps. Round 1 is BASE's (the momentum starts at zero, the lr undecayed),
    # so one-round runs such as the compressor matrix train the same with or without this entry.
    "fashion_mnist": {"server_momentum": 0.5, "lr_decay": 0.9},
}


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """Every flag's default for ``dataset``: BASE with the dataset's entry over it."""
    return {**BASE, **BY_DATASET.get(dataset, {})}


def fill_defaults(a: argparse.Namespace) -> argparse.Namespace:
    """Set each of the launcher's flags left at None (not given) to its default for ``a.dataset``."""
    for dest, value in dataset_defaults(a.dataset).items():
        if getattr(a, dest, value) is None:
            setattr(a, dest, value)
    return a
