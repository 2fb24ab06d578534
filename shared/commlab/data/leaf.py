"""FEMNIST and Shakespeare from LEAF's JSON output (TalwalkarLab/leaf: `data/<name>/data/train/*.json`
and `data/test/*.json`, made by its preprocess.sh): each file holds `users`, `num_samples` and
`user_data` {user: {"x": [...], "y": [...]}}. Every user is a writer (FEMNIST) or a speaking role
(Shakespeare): the training samples keep their user as their group, for the natural partition.

The data directory holds `femnist/data/{train,test}/` and `shakespeare/data/{train,test}/` (LEAF's
own layout below `leaf/data/`). Sizes vary with LEAF's sampling flags, so the checks are the format,
the shapes and the value ranges, file by file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .dataset import DatasetError, DatasetSpec, RawData, register_dataset

URL = "https://github.com/TalwalkarLab/leaf"
# models/utils/language_utils.py of LEAF: the 80 characters of its Shakespeare model, in index order.
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
LETTER_INDEX = {c: i for i, c in enumerate(LETTERS)}
SEQ_LEN = 80
FEMNIST_CLASSES = 62
PIXELS = 28 * 28

UserSamples = Callable[[list, list, str], tuple[np.ndarray, np.ndarray]]


def femnist_samples(x: list, y: list, where: str) -> tuple[np.ndarray, np.ndarray]:
    """784 pixel values in [0, 1] a sample (LEAF writes value/255) -> uint8 (n, 1, 28, 28)."""
    try:
        pixels = np.asarray(x, dtype=np.float64)
        labels = np.asarray(y, dtype=np.int64)
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: x must be lists of {PIXELS} numbers, y integers") from None
    if pixels.ndim != 2 or pixels.shape[1] != PIXELS or labels.ndim != 1 or not np.array_equal(labels, y):
        raise DatasetError(f"{where}: x must be lists of {PIXELS} numbers, y integers")
    if not (np.isfinite(pixels).all() and pixels.min(initial=0) >= 0 and pixels.max(initial=0) <= 1):
        raise DatasetError(f"{where}: pixel values outside [0, 1]")
    return np.rint(pixels * 255).astype(np.uint8).reshape(-1, 1, 28, 28), labels


def shakespeare_samples(x: list, y: list, where: str) -> tuple[np.ndarray, np.ndarray]:
    """80-character strings and the next character -> LEAF's letter indices."""
    if not all(isinstance(s, str) and len(s) == SEQ_LEN for s in x) or \
            not all(isinstance(c, str) and len(c) == 1 for c in y):
        raise DatasetError(f"{where}: x must be strings of {SEQ_LEN} characters, y single characters")
    try:
        tokens = np.array([[LETTER_INDEX[c] for c in s] for s in x], dtype=np.uint8).reshape(-1, SEQ_LEN)
        labels = np.array([LETTER_INDEX[c] for c in y], dtype=np.int64)
    except KeyError as e:
        raise DatasetError(f"{where}: character {e.args[0]!r} is not one of LEAF's {len(LETTERS)}") from None
    return tokens, labels


def _read_split(directory: Path, samples: UserSamples) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(users, x, y, user index of each sample) over every JSON file of one split, files in name order."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise DatasetError(f"no LEAF JSON files in {directory}")
    users: list[str] = []
    seen: set[str] = set()
    xs, ys, groups = [], [], []
    for path in files:
        try:
            content: Any = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as e:
            raise DatasetError(f"{path}: not readable JSON ({' '.join(str(e).split())[:200]})") from None
        if not isinstance(content, dict) or not {"users", "num_samples", "user_data"} <= set(content):
            raise DatasetError(f"{path}: not LEAF output (needs keys users, num_samples, user_data)")
        names, counts, data = content["users"], content["num_samples"], content["user_data"]
        if not isinstance(names, list) or not isinstance(counts, list) or len(names) != len(counts) \
                or not isinstance(data, dict):
            raise DatasetError(f"{path}: users and num_samples must be lists of one length, user_data an object")
        for name, count in zip(names, counts):
            entry = data.get(name) if isinstance(name, str) else None
            if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
                raise DatasetError(f"{path}: user {name!r} has no user_data with lists x and y")
            if name in seen:
                raise DatasetError(f"{path}: user {name!r} appears twice in {directory}")
            if not (len(entry["x"]) == len(entry["y"]) == count) or count == 0:
                raise DatasetError(f"{path}: user {name!r} has {len(entry['x'])} x, {len(entry['y'])} y, "
                                   f"num_samples {count}")
            x, y = samples(entry["x"], entry["y"], f"{path}: user {name!r}")
            groups.append(np.full(len(y), len(users), dtype=np.int32))
            users.append(name)
            seen.add(name)
            xs.append(x)
            ys.append(y)
    return users, np.concatenate(xs), np.concatenate(ys), np.concatenate(groups)


def leaf_reader(name: str, samples: UserSamples) -> Callable[[Path], RawData]:
    def read(root: Path) -> RawData:
        base = root / name / "data"
        for split in ("train", "test"):
            if not (base / split).is_dir():
                raise DatasetError(f"{name}: {base / split}/ not found: run LEAF's data/{name}/preprocess.sh "
                                   f"({URL}) and copy its data/{name}/data/ folder to {base}")
        users, train_x, train_y, groups = _read_split(base / "train", samples)
        _, test_x, test_y, _ = _read_split(base / "test", samples)
        return RawData(train_x, train_y, test_x, test_y, train_groups=groups, group_names=tuple(users))
    return read


register_dataset(DatasetSpec(
    name="femnist", reader=leaf_reader("femnist", femnist_samples), sample_shape=(1, 28, 28),
    num_classes=FEMNIST_CLASSES, source=f"LEAF's femnist JSON (data/femnist/data/train, test) from {URL}"))
register_dataset(DatasetSpec(
    name="shakespeare", reader=leaf_reader("shakespeare", shakespeare_samples), sample_shape=(SEQ_LEN,),
    num_classes=len(LETTERS), tokens=True,
    source=f"LEAF's shakespeare JSON (data/shakespeare/data/train, test) from {URL}"))
