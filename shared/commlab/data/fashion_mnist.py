"""Fashion-MNIST from the IDX files of Debian's `dataset-fashion-mnist` package."""
from __future__ import annotations

import os
from pathlib import Path

from .dataset import DatasetError, DatasetSpec, RawData, register_dataset
from .idx import read_idx

DEBIAN_PACKAGE = "dataset-fashion-mnist"
DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")  # from `dpkg -L dataset-fashion-mnist`
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def read_fashion_mnist(root: Path) -> RawData:
    """The Debian package's files; `root` (the data directory) plays no part.
    COMMLAB_FASHION_MNIST_DIR points elsewhere, e.g. to a copy mounted into a container."""
    directory = Path(os.environ.get("COMMLAB_FASHION_MNIST_DIR", DEFAULT_DIR))
    if not directory.is_dir():
        raise DatasetError(
            f"Fashion-MNIST directory {directory} not found: apt-get install {DEBIAN_PACKAGE} as root "
            "(make data-install), or set COMMLAB_FASHION_MNIST_DIR")
    train_x, train_y, test_x, test_y = (read_idx(directory / name) for name in FILES)
    return RawData(train_x[:, None], train_y, test_x[:, None], test_y)


register_dataset(DatasetSpec(
    name="fashion_mnist", reader=read_fashion_mnist, sample_shape=(1, 28, 28), num_classes=10,
    source=f"the Debian package {DEBIAN_PACKAGE} ({DEFAULT_DIR})", mean=(0.2860,), std=(0.3530,), train_size=60000,
    test_size=10000, train_head=(9, 0, 0, 3, 0, 2, 7, 2, 5, 5), test_head=(9, 2, 1, 1, 6, 1, 4, 6, 5, 7),
    class_counts=(6000, 1000),
))
