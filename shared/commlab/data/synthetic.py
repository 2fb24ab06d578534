"""`synthetic:<name>`: inputs of a named dataset's shape and kind, labelled by a fixed random teacher,
so a run of any model at any size moves real bytes, takes real time and its loss falls, without
the dataset's files. Seeded: every process generates the same arrays; never cached.

Images: the teacher is a linear classifier whose weights are one random image a class (the
prototypes); an input is a uniformly drawn prototype mixed half and half with uniform noise, and
its label is the teacher's (almost always that prototype's class). Token ids: uniform random
tokens; the teacher is a fixed random permutation of the vocabulary, giving the target of each
position (language models) or of the last token (next-character models).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from .dataset import DatasetError, DatasetSpec, RawData, dataset_spec, normalise, register_family

TRAIN_SIZE, TEST_SIZE = 10_000, 2_000
SEED = 0


def _images(spec: DatasetSpec, classes: int, n: int, rng: np.random.Generator,
            prototypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    picked = prototypes[rng.integers(0, classes, n)].astype(np.uint16)
    x = ((picked + rng.integers(0, 256, picked.shape, dtype=np.uint16)) // 2).astype(np.uint8)
    teacher = normalise(prototypes, spec.mean, spec.std).reshape(classes, -1)
    teacher -= teacher.mean(1, keepdims=True)
    return x, (normalise(x, spec.mean, spec.std).reshape(n, -1) @ teacher.T).argmax(1)


def _tokens(spec: DatasetSpec, classes: int, n: int, rng: np.random.Generator,
            table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = rng.integers(0, classes, (n, *spec.sample_shape), dtype=np.int32)
    return x, table[x] if spec.sequence_targets else table[x[:, -1]]


def synthetic_spec(name: str) -> DatasetSpec:
    base = dataset_spec(name.removeprefix("synthetic:"))
    if base.num_classes is None or base.name.startswith("synthetic:"):
        raise DatasetError(f"{name}: needs a dataset whose classes are known without its files "
                           f"(e.g. synthetic:cifar10), not {base.name}")
    classes = base.num_classes

    def read(root: Path) -> RawData:
        rng = np.random.default_rng(SEED)
        if base.tokens:
            make, teacher = _tokens, rng.permutation(classes).astype(np.int32)
        else:
            make, teacher = _images, rng.integers(0, 256, (classes, *base.sample_shape), dtype=np.uint8)
        (train_x, train_y), (test_x, test_y) = (make(base, classes, n, rng, teacher) for n in (TRAIN_SIZE, TEST_SIZE))
        return RawData(train_x, train_y, test_x, test_y)
    return replace(base, name=name, reader=read, source=f"generated (the shape and classes of {base.name})",
                   train_size=TRAIN_SIZE, test_size=TEST_SIZE, train_head=(), test_head=(), class_counts=None,
                   cached=False)


register_family("synthetic:", synthetic_spec)
