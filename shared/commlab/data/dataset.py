"""Datasets by name: a registry of readers, a local uint8 cache, and normalised float32 arrays.

A reader returns the raw uint8 images (N, 28, 28) and labels in the dataset's canonical order.
The first call converts them once into `<cache>/<name>-uint8.npz` (written atomically), so later
loads are a single fast read. Adding a dataset means registering a reader; node code only names it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from commlab.metrics import write_atomic

RawArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # train_x, train_y, test_x, test_y (uint8)


class DatasetError(RuntimeError):
    """A dataset cannot be read: unknown name, missing source file or package, wrong contents."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    reader: Callable[[], RawArrays]
    mean: float
    std: float
    train_size: int
    test_size: int
    # First labels of train and test in the canonical order: catches shuffled or swapped sources.
    train_head: tuple[int, ...]
    test_head: tuple[int, ...]
    num_classes: int = 10


@dataclass
class Dataset:
    name: str
    train_x: np.ndarray  # (N, 1, 28, 28) float32, normalised
    train_y: np.ndarray  # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int


_REGISTRY: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> None:
    _REGISTRY[spec.name] = spec


def dataset_names() -> list[str]:
    return sorted(_REGISTRY)


def cache_dir(root: Path | str | None = None) -> Path:
    if root is not None:
        return Path(root)
    env = os.environ.get("COMMLAB_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "commlab"


def dataset_spec(name: str) -> DatasetSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(dataset_names())}") from None


def _check(spec: DatasetSpec, raw: RawArrays, origin: str) -> None:
    train_x, train_y, test_x, test_y = raw
    expected = {
        "train_x": (train_x, (spec.train_size, 28, 28)),
        "train_y": (train_y, (spec.train_size,)),
        "test_x": (test_x, (spec.test_size, 28, 28)),
        "test_y": (test_y, (spec.test_size,)),
    }
    for key, (arr, shape) in expected.items():
        if arr.shape != shape or arr.dtype != np.uint8:
            raise DatasetError(f"{spec.name} from {origin}: {key} is {arr.dtype}{arr.shape}, expected uint8{shape}")
    for key, labels, head in (("train", train_y, spec.train_head), ("test", test_y, spec.test_head)):
        if tuple(int(v) for v in labels[: len(head)]) != head:
            raise DatasetError(f"{spec.name} from {origin}: {key} labels are not in the canonical order")
    if int(train_y.max()) >= spec.num_classes or int(test_y.max()) >= spec.num_classes:
        raise DatasetError(f"{spec.name} from {origin}: label outside 0..{spec.num_classes - 1}")


def _write_cache(path: Path, raw: RawArrays) -> None:
    """Readers never see a half-written cache, even with concurrent loaders; readable by all, since
    other users and containers share the cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: np.savez(f, train_x=raw[0], train_y=raw[1], test_x=raw[2], test_y=raw[3]),
                 mode=0o644)


def load_raw(name: str, root: Path | str | None = None) -> RawArrays:
    """uint8 arrays in canonical order, from the cache when valid, else from the source (then cached)."""
    spec = dataset_spec(name)
    path = cache_dir(root) / f"{name}-uint8.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                raw = (z["train_x"], z["train_y"], z["test_x"], z["test_y"])
            _check(spec, raw, str(path))
            return raw
        except (DatasetError, OSError, ValueError, KeyError) as exc:
            print(f"commlab.data: ignoring bad cache {path} ({exc}); rebuilding", file=sys.stderr)
    raw = spec.reader()
    _check(spec, raw, "source")
    try:
        _write_cache(path, raw)
    except OSError as exc:  # a read-only home (e.g. in a container) must not stop training
        print(f"commlab.data: cannot write cache {path} ({exc}); continuing uncached", file=sys.stderr)
    return raw


def normalise(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28) with (x/255 - mean) / std."""
    x = images.astype(np.float32)[:, None]
    x *= np.float32(1.0 / (255.0 * std))
    x -= np.float32(mean / std)
    return x


def load_dataset(name: str, root: Path | str | None = None) -> Dataset:
    """The named dataset, normalised; `root` overrides the cache directory."""
    spec = dataset_spec(name)
    train_x, train_y, test_x, test_y = load_raw(name, root)
    return Dataset(
        name=name,
        train_x=normalise(train_x, spec.mean, spec.std),
        train_y=train_y.astype(np.int64),
        test_x=normalise(test_x, spec.mean, spec.std),
        test_y=test_y.astype(np.int64),
        num_classes=spec.num_classes,
    )
