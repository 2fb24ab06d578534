"""Reader for the IDX format of the original MNIST distribution (optionally gzipped)."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from .dataset import DatasetError

_UBYTE = 0x08


def read_idx(path: Path) -> np.ndarray:
    """uint8 array of the shape the IDX header declares; raises DatasetError naming a bad or missing file."""
    if not path.is_file():
        raise DatasetError(f"dataset file {path} not found")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != _UBYTE:
        raise DatasetError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    if len(data) != header + int(np.prod(shape)):
        raise DatasetError(f"{path}: header declares {shape} but the payload has {len(data) - header} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)
