"""The one frame a rank contributes to the per-step allgather.

Layout (little endian):
  header  b"DGCF", version u8, value dtype u8 (1 fp16, 2 fp32), sparse tensors u16, dense numel u32
  per sparse tensor: count u32, index mode u8, index bytes u32, indices (commlab.codecs.indices:
                     delta varints or a bitmap, whichever is smaller), count values
  dense tail: dense numel float32 (biases and other small tensors, exchanged uncompressed)
Both sides know the tensor layout (same model), so names and shapes never travel; the header
repeats the counts so a frame from a different model is rejected rather than misapplied.
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import indices as index_coding
from commlab.codecs.errors import CodecError

MAGIC = b"DGCF"
VERSION = 1
HEADER = struct.Struct("<4sBBHI")
ENTRY = struct.Struct("<IBI")
VALUE_DTYPES = {1: np.dtype("<f2"), 2: np.dtype("<f4")}
FP16_MAX = float(np.finfo(np.float16).max)


class FrameError(ValueError):
    """A DGC frame is malformed or does not match the local model layout."""


def encode_frame(sparse: list[tuple[np.ndarray, np.ndarray]], numels: list[int],
                 dense: np.ndarray, fp16: bool = True) -> bytes:
    """sparse: (sorted indices, values) per sparsified tensor (of `numels` elements) in layout
    order; dense: float32."""
    code = 1 if fp16 else 2
    parts = [HEADER.pack(MAGIC, VERSION, code, len(sparse), dense.size)]
    for (indices, values), numel in zip(sparse, numels):
        mode, idx_bytes = index_coding.encode(indices, numel)
        parts += [ENTRY.pack(indices.size, mode, idx_bytes.size), idx_bytes.tobytes(),
                  np.asarray(values, dtype=VALUE_DTYPES[code]).tobytes()]
    parts.append(np.asarray(dense, dtype="<f4").tobytes())
    return b"".join(parts)


def decode_frame(frame: bytes | memoryview, numels: list[int], dense_numel: int
                 ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Validating inverse of encode_frame for a model whose sparse tensors have `numels`."""
    view = memoryview(frame)
    if len(view) < HEADER.size:
        raise FrameError(f"frame of {len(view)} bytes is shorter than its header")
    magic, version, code, n_sparse, n_dense = HEADER.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise FrameError(f"not a DGC v{VERSION} frame (magic {magic!r}, version {version})")
    if code not in VALUE_DTYPES:
        raise FrameError(f"unknown value dtype code {code}")
    if n_sparse != len(numels) or n_dense != dense_numel:
        raise FrameError(f"frame has {n_sparse} sparse tensors and {n_dense} dense values, "
                         f"model has {len(numels)} and {dense_numel}")
    dtype, off, sparse = VALUE_DTYPES[code], HEADER.size, []
    for t, numel in enumerate(numels):
        if off + ENTRY.size > len(view):
            raise FrameError(f"frame truncated in the entry of sparse tensor {t}")
        count, mode, idx_len = ENTRY.unpack_from(view, off)
        off += ENTRY.size
        end = off + idx_len + count * dtype.itemsize
        if count > numel or end > len(view):
            raise FrameError(f"sparse tensor {t}: {count} values / {idx_len} index bytes do not "
                             f"fit (numel {numel}, {len(view) - off} bytes left)")
        try:
            indices = index_coding.decode(
                mode, np.frombuffer(view[off:off + idx_len], np.uint8), numel, count)
        except CodecError as e:
            raise FrameError(f"sparse tensor {t}: {e}") from None
        values = np.frombuffer(view[off + idx_len:end], dtype=dtype).astype(np.float32)
        sparse.append((indices, values))
        off = end
    if len(view) - off != 4 * dense_numel:
        raise FrameError(f"dense tail is {len(view) - off} bytes, expected {4 * dense_numel}")
    dense = np.frombuffer(view[off:], dtype="<f4").astype(np.float32)
    if not (all(np.isfinite(v).all() for _, v in sparse) and np.isfinite(dense).all()):
        raise FrameError("frame carries non-finite values")
    return sparse, dense
