"""Smaller views of a Dataset for fast tests and CI (the test split is cut the same way)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .dataset import Dataset


def _take(ds: Dataset, train_idx: np.ndarray, test_idx: np.ndarray) -> Dataset:
    return replace(ds, train_x=ds.train_x[train_idx], train_y=ds.train_y[train_idx],
                   test_x=ds.test_x[test_idx], test_y=ds.test_y[test_idx])


def subset_first(ds: Dataset, n_train: int, n_test: int | None = None) -> Dataset:
    """The first n_train training and n_test (default: all) test samples."""
    return _take(ds, np.arange(min(n_train, len(ds.train_y))),
                 np.arange(len(ds.test_y) if n_test is None else min(n_test, len(ds.test_y))))


def subset_random(ds: Dataset, n_train: int, n_test: int | None = None, seed: int = 0) -> Dataset:
    """n_train random training and n_test random test samples (sorted indices), fixed by seed."""
    rng = np.random.default_rng(seed)
    pick = lambda n, total: np.sort(rng.choice(total, size=min(n, total), replace=False))  # noqa: E731
    return _take(ds, pick(n_train, len(ds.train_y)),
                 np.arange(len(ds.test_y)) if n_test is None else pick(n_test, len(ds.test_y)))
