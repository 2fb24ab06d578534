"""Datasets by name: a registry of readers, a local cache, and the arrays a model trains on.

A reader gets the data directory and returns RawData in the dataset's canonical order: images as
uint8 (N, channels, height, width), token ids as integers (N, steps); one label a sample, or one
a position for a language model; for datasets of writers or roles, each training sample's group.
Every load checks the arrays against the dataset's spec (shapes, official sizes, label counts,
classes); the first load of a named dataset converts its source once into `<data dir>/<name>.npz`
(written atomically), so later loads are a single fast read. Families of names (`text:<path>`,
`synthetic:<name>`) make their spec from the name and are not cached.

The data directory is where the user puts the official files and the cache lives:
`COMMLAB_DATA_DIR` (`make ... DATA_DIR=`), else ~/.cache/commlab.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

import numpy as np

from commlab.output.run_folder import write_atomic


class DatasetError(RuntimeError):
    """A dataset cannot be read: unknown name, missing source file or package, wrong contents."""


@dataclass
class RawData:
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int | None = None          # a vocabulary read from the data; None: the spec's
    train_groups: np.ndarray | None = None  # index into group_names for each training sample
    group_names: tuple[str, ...] = ()       # writers (FEMNIST) or speaking roles (Shakespeare)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    reader: Callable[[Path], RawData]
    sample_shape: tuple[int, ...]           # one input: (channels, height, width) or (steps,)
    num_classes: int | None                 # classes (or vocabulary); None: the reader reads it from the data
    source: str                             # what a user provides and where to get it (docs, errors)
    tokens: bool = False                    # inputs are token ids, not uint8 images
    sequence_targets: bool = False          # one target a position (language model), not one a sample
    mean: tuple[float, ...] = (0.0,)        # per channel, of the images scaled to [0, 1]
    std: tuple[float, ...] = (1.0,)
    train_size: int | None = None           # the official sizes; None: they vary (LEAF's sampling)
    test_size: int | None = None
    # First labels of train and test in the canonical order: catches shuffled or swapped sources.
    train_head: tuple[int, ...] = ()
    test_head: tuple[int, ...] = ()
    class_counts: tuple[int, int] | None = None  # every class's samples in train and test (balanced sets)
    cached: bool = True


@dataclass
class Dataset:
    name: str
    train_x: np.ndarray  # images: (N, C, H, W) float32, normalised; tokens: (N, steps) int64
    train_y: np.ndarray  # (N,) int64, or (N, steps) for a language model
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    train_groups: np.ndarray | None = None
    group_names: tuple[str, ...] = ()


_REGISTRY: dict[str, DatasetSpec] = {}
_FAMILIES: dict[str, Callable[[str], DatasetSpec]] = {}  # "text:" -> spec of "text:<rest>"


def register_dataset(spec: DatasetSpec) -> None:
    _REGISTRY[spec.name] = spec


def register_family(prefix: str, make_spec: Callable[[str], DatasetSpec]) -> None:
    _FAMILIES[prefix] = make_spec


def dataset_names() -> list[str]:
    return sorted(_REGISTRY)


def data_dir(root: Path | str | None = None) -> Path:
    if root is not None:
        return Path(root)
    env = os.environ.get("COMMLAB_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "commlab"


def dataset_spec(name: str) -> DatasetSpec:
    for prefix, make_spec in _FAMILIES.items():
        if name.startswith(prefix):
            return make_spec(name)
    try:
        return _REGISTRY[name]
    except KeyError:
        known = [*dataset_names(), *(f"{p}<{'path' if p == 'text:' else 'name'}>" for p in sorted(_FAMILIES))]
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(known)}") from None


def classes_of(spec: DatasetSpec, raw: RawData) -> int:
    return spec.num_classes if spec.num_classes is not None else int(raw.num_classes or 0)


def _check(spec: DatasetSpec, raw: RawData, origin: str) -> None:
    where = f"{spec.name} from {origin}"
    classes = classes_of(spec, raw)
    if spec.num_classes is not None and raw.num_classes not in (None, spec.num_classes):
        raise DatasetError(f"{where}: {raw.num_classes:,} classes, the official set has {spec.num_classes:,}")
    if classes < 2:
        raise DatasetError(f"{where}: {classes} classes; a dataset needs at least 2")
    for split, x, y, size in (("train", raw.train_x, raw.train_y, spec.train_size),
                              ("test", raw.test_x, raw.test_y, spec.test_size)):
        kind, ok = ("integer", np.issubdtype(x.dtype, np.integer)) if spec.tokens else ("uint8", x.dtype == np.uint8)
        if x.shape[1:] != spec.sample_shape or not ok:
            raise DatasetError(f"{where}: {split} inputs are {x.dtype}{x.shape}, expected {kind} (N, "
                               f"{', '.join(map(str, spec.sample_shape))})")
        if len(x) == 0 or (size is not None and len(x) != size):
            raise DatasetError(f"{where}: {split} holds {len(x):,} samples, "
                               + (f"the official set {size:,}" if size else "expected some"))
        target_shape = (len(x), *spec.sample_shape) if spec.sequence_targets else (len(x),)
        if y.shape != target_shape or not np.issubdtype(y.dtype, np.integer):
            raise DatasetError(f"{where}: {split} labels are {y.dtype}{y.shape}, expected integers {target_shape}")
        for what, arr in (("labels", y), *((("token ids", x),) if spec.tokens else ())):
            if int(arr.min()) < 0 or int(arr.max()) >= classes:
                raise DatasetError(f"{where}: {split} {what} outside 0..{classes - 1}")
    for split, y, head in (("train", raw.train_y, spec.train_head), ("test", raw.test_y, spec.test_head)):
        if tuple(int(v) for v in y[: len(head)]) != head:
            raise DatasetError(f"{where}: {split} labels are not in the canonical order")
    if spec.class_counts is not None:
        for split, y, count in (("train", raw.train_y, spec.class_counts[0]), ("test", raw.test_y, spec.class_counts[1])):
            counts = np.bincount(y, minlength=classes)
            if (counts != count).any():
                raise DatasetError(f"{where}: {split} has {counts.min()}..{counts.max()} samples a class, "
                                   f"the official set {count} of each of {classes}")
    groups = raw.train_groups
    if groups is not None and (groups.shape != raw.train_y.shape[:1] or int(groups.min()) < 0
                               or int(groups.max()) >= len(raw.group_names)):
        raise DatasetError(f"{where}: writer/role index does not match the {len(raw.group_names)} names")


def _write_cache(path: Path, raw: RawData) -> None:
    """Readers never see a half-written cache, even with concurrent loaders; readable by all, since
    other users and containers share the cache."""
    arrays = {f.name: getattr(raw, f.name) for f in fields(raw) if getattr(raw, f.name) is not None}
    arrays["group_names"] = np.array(raw.group_names, dtype=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: np.savez(f, **arrays), mode=0o644)


def _read_cache(path: Path) -> RawData:
    with np.load(path) as z:
        return RawData(train_x=z["train_x"], train_y=z["train_y"], test_x=z["test_x"], test_y=z["test_y"],
                       num_classes=int(z["num_classes"]) if "num_classes" in z else None,
                       train_groups=z["train_groups"] if "train_groups" in z else None,
                       group_names=tuple(str(n) for n in z["group_names"]))


def load_raw(name: str, root: Path | str | None = None) -> RawData:
    """Checked arrays in canonical order, from the cache when valid, else from the source (then cached)."""
    spec = dataset_spec(name)
    directory = data_dir(root)
    path = directory / f"{name}.npz"
    if spec.cached and path.exists():
        try:
            raw = _read_cache(path)
            _check(spec, raw, str(path))
            return raw
        except (DatasetError, OSError, ValueError, KeyError) as exc:
            print(f"commlab.data: ignoring bad cache {path} ({exc}); rebuilding", file=sys.stderr)
    raw = spec.reader(directory)
    _check(spec, raw, "source")
    if spec.cached:
        try:
            _write_cache(path, raw)
        except OSError as exc:  # a read-only home (e.g. in a container) must not stop training
            print(f"commlab.data: cannot write cache {path} ({exc}); continuing uncached", file=sys.stderr)
    return raw


def normalise(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 with (x/255 - mean[c]) / std[c]."""
    x = images.astype(np.float32)
    scale = (1.0 / (255.0 * np.asarray(std, np.float64))).astype(np.float32).reshape(1, -1, 1, 1)
    shift = (np.asarray(mean, np.float64) / np.asarray(std, np.float64)).astype(np.float32).reshape(1, -1, 1, 1)
    x *= scale
    x -= shift
    return x


def to_dataset(spec: DatasetSpec, raw: RawData) -> Dataset:
    """Model-ready arrays: images normalised to float32, token ids and labels as int64."""
    def inputs(x: np.ndarray) -> np.ndarray:
        return x.astype(np.int64) if spec.tokens else normalise(x, spec.mean, spec.std)
    return Dataset(name=spec.name, train_x=inputs(raw.train_x), train_y=raw.train_y.astype(np.int64),
                   test_x=inputs(raw.test_x), test_y=raw.test_y.astype(np.int64), num_classes=classes_of(spec, raw),
                   train_groups=raw.train_groups, group_names=raw.group_names)


def load_dataset(name: str, root: Path | str | None = None) -> Dataset:
    """The named dataset, model-ready; `root` overrides the data directory."""
    return to_dataset(dataset_spec(name), load_raw(name, root))
