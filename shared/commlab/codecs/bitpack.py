"""Pack unsigned integers of 1..8 bits densely, vectorised: 8 values form one uint64 word of
8*bits bits, of which the low ``bits`` bytes are kept; the stream is trimmed to ceil(D*bits/8)."""
from __future__ import annotations

import numpy as np

from commlab.codecs.errors import CodecError


def packed_size(count: int, bits: int) -> int:
    return -(-count * bits // 8)


def pack(values: np.ndarray, bits: int) -> np.ndarray:
    """uint8 values < 2**bits -> uint8 stream of packed_size(len, bits) bytes."""
    groups = -(-values.size // 8)
    padded = np.zeros(groups * 8, np.uint64)
    padded[: values.size] = values
    lanes = padded.reshape(groups, 8)
    word = np.zeros(groups, np.uint64)
    for j in range(8):
        word |= lanes[:, j] << np.uint64(bits * j)
    stream = np.ascontiguousarray(word.view("<u8").view(np.uint8).reshape(groups, 8)[:, :bits])
    return stream.reshape(-1)[: packed_size(values.size, bits)]


def unpack(stream: np.ndarray, count: int, bits: int) -> np.ndarray:
    """Inverse of pack; rejects streams of the wrong length or with non-zero padding bits."""
    if stream.size != packed_size(count, bits):
        raise CodecError(
            f"packed stream has {stream.size} bytes, {count} values of {bits} bits need {packed_size(count, bits)}"
        )
    groups = -(-count // 8)
    flat = np.zeros(groups * bits, np.uint8)
    flat[: stream.size] = stream
    raw = np.zeros((groups, 8), np.uint8)
    raw[:, :bits] = flat.reshape(groups, bits)
    word = raw.view("<u8").reshape(groups)
    mask = np.uint64((1 << bits) - 1)
    out = np.empty((groups, 8), np.uint8)
    for j in range(8):
        out[:, j] = (word >> np.uint64(bits * j)) & mask
    flat_out = out.reshape(-1)
    # Bits past count*bits all belong to the zero padding values of the last group.
    if flat_out[count:].any():
        raise CodecError("packed stream has non-zero padding bits")
    return flat_out[:count]
