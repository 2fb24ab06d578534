"""int8_sparse: top-k selection (topk.py), then the kept values int8-quantized in chunks (int8.py)."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import indices, int8, topk
from commlab.codecs.base import Codec, register
from commlab.codecs.errors import CodecError, chunk_size


@register
class Int8Sparse(Codec):
    name = "int8_sparse"
    codec_id = 4
    lossy = True
    sized_by_content = True
    params_struct = struct.Struct("<QBQI")  # k, index coding mode, index section bytes, chunk

    def __init__(self, ratio: float = 0.10, chunk: int = 8192, **kw) -> None:
        super().__init__(**kw)
        self.ratio = topk.check_ratio(ratio)
        self.chunk = chunk_size("int8 chunk", chunk)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        idx, values = topk.select(vec, self.ratio)
        mode, idx_bytes = indices.encode(idx, vec.size)
        scales, q = int8.quantize(values, self.chunk)
        return (idx.size, mode, idx_bytes.size, self.chunk), [idx_bytes, scales, q]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        return topk.spread(*self._kept(numel, params, payload, indices.decode_masks), numel)

    def _add_decoded(self, numel: int, params: tuple, payload: memoryview, out: np.ndarray,
                     weight: np.float32) -> None:
        idx, values = self._kept(numel, params, payload)
        values *= weight
        topk.scatter_add(idx, values, out)

    def _kept(self, numel: int, params: tuple, payload: memoryview,
              decode=indices.decode) -> tuple[np.ndarray, np.ndarray]:
        """The validated positions (as ``decode`` gives them: topk.split_sparse) and float32 values
        of the kept entries."""
        k, mode, index_len, chunk = params
        if chunk == 0:
            raise CodecError(f"{self.name}: chunk size 0 in frame")
        idx, rest = topk.split_sparse(payload, numel, k, mode, index_len, self.name, decode)
        return idx, int8.dequantize(*int8.read_quantized(rest, k, chunk, self.name), chunk)

    def payload_size(self, numel: int) -> int:
        k = topk.num_kept(numel, self.ratio)
        return indices.bound(numel, k) + 4 * -(-k // self.chunk) + k
