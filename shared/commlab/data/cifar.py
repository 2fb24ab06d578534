"""CIFAR-10 and CIFAR-100 from the official python-pickle release: the tarball
(cifar-10-python.tar.gz, cifar-100-python.tar.gz) or the folder it unpacks to, in the data directory.

The batches are pickles, which can run code when loaded: they are read by an unpickler that builds
nothing but dicts, lists, numbers, bytes and numpy arrays, refuses any other object, and the result
is checked to be uint8 pixels and integer labels; a bad file is a DatasetError naming it.
"""
from __future__ import annotations

import codecs
import io
import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dataset import DatasetError, DatasetSpec, RawData, register_dataset

URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
PIXELS = 3 * 32 * 32
_RECONSTRUCT = np.zeros(0).__reduce__()[0]  # what an array's pickle calls, under either numpy module name
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 1 (the official files)
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 2
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,  # bytes pickled by Python 3 at protocol 2
}


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to build {module}.{name}") from None


@dataclass(frozen=True)
class Release:
    name: str
    archive: str
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str


CIFAR10 = Release("cifar10", "cifar-10-python.tar.gz", "cifar-10-batches-py",
                  tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), "labels")
CIFAR100 = Release("cifar100", "cifar-100-python.tar.gz", "cifar-100-python", ("train",), ("test",), "fine_labels")


def _batch(data: bytes, where: str, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (n, 3, 32, 32), labels) of one pickled batch."""
    try:
        batch = _DataOnly(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
        raise DatasetError(f"{where}: not a CIFAR python batch ({type(e).__name__}: {e})") from None
    if not isinstance(batch, dict):
        raise DatasetError(f"{where}: not a CIFAR python batch (a {type(batch).__name__}, not a dict)")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    pixels, labels = batch.get("data"), batch.get(label_key)
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 or pixels.shape[1] != PIXELS:
        shown = f"{pixels.dtype}{pixels.shape}" if isinstance(pixels, np.ndarray) else type(pixels).__name__
        raise DatasetError(f"{where}: 'data' is {shown}, expected uint8 (n, {PIXELS})")
    if not isinstance(labels, list) or len(labels) != len(pixels) or not all(type(v) is int for v in labels):
        raise DatasetError(f"{where}: {label_key!r} is not a list of {len(pixels)} integers")
    return pixels.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def _members(release: Release, root: Path) -> tuple[str, dict[str, bytes]]:
    """(where it was found, member name -> bytes) from the tarball or else the unpacked folder."""
    names = release.train_files + release.test_files
    archive, folder = root / release.archive, root / release.folder
    if archive.is_file():
        try:
            with tarfile.open(archive, "r:gz") as tar:
                found = {}
                for name in names:
                    member = tar.extractfile(f"{release.folder}/{name}")  # read in memory: nothing is unpacked
                    if member is None:
                        raise KeyError(name)
                    found[name] = member.read()
        except KeyError as e:
            raise DatasetError(f"{archive}: lacks {release.folder}/{e.args[0]}") from None
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DatasetError(f"{archive}: not a readable .tar.gz ({e})") from None
        return str(archive), found
    if folder.is_dir():
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise DatasetError(f"{folder}: lacks {', '.join(missing)}")
        return str(folder), {n: (folder / n).read_bytes() for n in names}
    raise DatasetError(f"{release.name}: neither {archive} nor {folder}/ found: download {release.archive} from "
                       f"{URL} into {root} (make ... DATA_DIR=, or COMMLAB_DATA_DIR)")


def reader(release: Release):
    def read(root: Path) -> RawData:
        where, found = _members(release, root)
        splits = []
        for files in (release.train_files, release.test_files):
            parts = [_batch(found[n], f"{where}: {n}", release.label_key) for n in files]
            splits.append((np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])))
        (train_x, train_y), (test_x, test_y) = splits
        return RawData(train_x, train_y, test_x, test_y)
    return read


register_dataset(DatasetSpec(
    name="cifar10", reader=reader(CIFAR10), sample_shape=(3, 32, 32), num_classes=10,
    source=f"{CIFAR10.archive} (or its folder {CIFAR10.folder}/) from {URL}",
    mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616), train_size=50000, test_size=10000,
    class_counts=(5000, 1000)))
register_dataset(DatasetSpec(
    name="cifar100", reader=reader(CIFAR100), sample_shape=(3, 32, 32), num_classes=100,
    source=f"{CIFAR100.archive} (or its folder {CIFAR100.folder}/) from {URL}",
    mean=(0.5071, 0.4865, 0.4409), std=(0.2673, 0.2564, 0.2762), train_size=50000, test_size=10000,
    class_counts=(500, 100)))
