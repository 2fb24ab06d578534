"""Smaller views of a Dataset (or of its RawData, before normalising) for fast tests and CI (the
test split is cut the same way); writers and roles go with their samples."""
from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import numpy as np

from .dataset import Dataset, RawData

D = TypeVar("D", Dataset, RawData)


def _take(ds: D, train_idx: np.ndarray, test_idx: np.ndarray) -> D:
    return replace(ds, train_x=ds.train_x[train_idx], train_y=ds.train_y[train_idx],
                   test_x=ds.test_x[test_idx], test_y=ds.test_y[test_idx],
                   train_groups=None if ds.train_groups is None else ds.train_groups[train_idx])


def subset_first(ds: D, n_train: int, n_test: int | None = None) -> D:
    """The first n_train training and n_test (default: all) test samples."""
    return _take(ds, np.arange(min(n_train, len(ds.train_y))),
                 np.arange(len(ds.test_y) if n_test is None else min(n_test, len(ds.test_y))))


def subset_random(ds: D, n_train: int, n_test: int | None = None, seed: int = 0) -> D:
    """n_train random training and n_test random test samples (sorted indices), fixed by seed."""
    rng = np.random.default_rng(seed)
    pick = lambda n, total: np.sort(rng.choice(total, size=min(n, total), replace=False))  # noqa: E731
    return _take(ds, pick(n_train, len(ds.train_y)),
                 np.arange(len(ds.test_y)) if n_test is None else pick(n_test, len(ds.test_y)))
