"""fp32_sparse: keep the k = ceil(ratio * D) largest-magnitude values; send compact indices
(indices.py) and the kept values as float32."""
from __future__ import annotations

import math
import struct

import numpy as np

from commlab.codecs import indices
from commlab.codecs.base import Codec, register
from commlab.codecs.errors import CodecError


def check_ratio(ratio: float) -> float:
    if not 0.0 < ratio <= 1.0:
        raise CodecError(f"top-k ratio must be in (0, 1], got {ratio!r}")
    return float(ratio)


def num_kept(numel: int, ratio: float) -> int:
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def select(vec: np.ndarray, ratio: float) -> np.ndarray:
    """Sorted int64 positions of the k largest |vec| values."""
    k = num_kept(vec.size, ratio)
    if k == vec.size:
        return np.arange(k, dtype=np.int64)
    idx = np.argpartition(np.abs(vec), vec.size - k)[vec.size - k :]
    idx.sort()
    return idx.astype(np.int64, copy=False)


def split_sparse(
    payload: memoryview, numel: int, k: int, mode: int, index_len: int, what: str
) -> tuple[np.ndarray, memoryview]:
    """Decode the index section at the start of a sparse payload; return (indices, rest of payload)."""
    if k > numel:
        raise CodecError(f"{what}: {k} kept values for only {numel} elements")
    if index_len > len(payload):
        raise CodecError(f"{what}: {index_len}-byte index section overruns the {len(payload)}-byte payload")
    idx = indices.decode(mode, np.frombuffer(payload, np.uint8, index_len), numel, k)
    return idx, payload[index_len:]


@register
class TopK(Codec):
    name = "fp32_sparse"
    codec_id = 3
    lossy = True
    sized_by_content = True
    params_struct = struct.Struct("<QBQ")  # k, index coding mode, index section bytes

    def __init__(self, ratio: float = 0.10, **kw) -> None:
        super().__init__(**kw)
        self.ratio = check_ratio(ratio)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        idx = select(vec, self.ratio)
        mode, idx_bytes = indices.encode(idx, vec.size)
        return (idx.size, mode, idx_bytes.size), [idx_bytes, vec[idx]]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        k, mode, index_len = params
        idx, rest = split_sparse(payload, numel, k, mode, index_len, self.name)
        if len(rest) != 4 * k:
            raise CodecError(f"{self.name}: {len(rest)} value bytes for {k} float32 values")
        out = np.zeros(numel, np.float32)
        out[idx] = np.frombuffer(rest, "<f4")
        return out

    def payload_size(self, numel: int) -> int:
        k = num_kept(numel, self.ratio)
        return indices.bound(numel, k) + 4 * k
