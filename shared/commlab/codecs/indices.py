"""Compact coding of sorted sparse indices: delta + LEB128 varint, or a bitmap, whichever is smaller.

Both are vectorised numpy: the varint loop runs over byte positions (at most 5), never elements.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.errors import CodecError

VARINT = 0
BITMAP = 1
_MAX_VARINT_BYTES = 5  # numel <= 2**31, so a delta needs at most 5 groups of 7 bits


def varint_len(value: int) -> int:
    return max(1, -(-int(value).bit_length() // 7))


def bound(numel: int, k: int) -> int:
    """Upper bound of ``encode`` output for k indices below numel."""
    return min(-(-numel // 8), k * varint_len(max(numel - 1, 0)))


def _varint_lengths(deltas: np.ndarray) -> np.ndarray:
    lengths = np.ones(deltas.size, np.uint8)
    for j in range(1, _MAX_VARINT_BYTES):
        lengths += deltas >= np.uint32(1 << (7 * j))
    return lengths


def encode(idx: np.ndarray, numel: int) -> tuple[int, np.ndarray]:
    """Strictly increasing int64 indices -> (mode, uint8 bytes)."""
    deltas = np.diff(idx, prepend=0).astype(np.uint32)  # each below numel <= 2**31
    lengths = _varint_lengths(deltas)
    total = int(lengths.sum(dtype=np.int64))
    bitmap_len = -(-numel // 8)
    if bitmap_len < total:
        mask = np.zeros(numel, bool)
        mask[idx] = True
        return BITMAP, np.packbits(mask, bitorder="little")
    # Byte j of every varint at once, j up to the longest one: a loop over byte positions.
    out = np.empty(total, np.uint8)
    starts = np.cumsum(lengths, dtype=np.int64)
    starts -= lengths
    first = (deltas & np.uint32(0x7F)).astype(np.uint8)
    first |= (lengths > 1).view(np.uint8) << np.uint8(7)
    out[starts] = first
    longer = np.flatnonzero(lengths > 1)
    for j in range(1, int(lengths.max(initial=1))):
        group = (deltas[longer] >> np.uint32(7 * j)) & np.uint32(0x7F)
        group |= (lengths[longer] > j + 1).astype(np.uint32) << np.uint32(7)
        out[starts[longer] + j] = group
        longer = longer[lengths[longer] > j + 1]
    return VARINT, out


def decode(mode: int, data: np.ndarray, numel: int, k: int) -> np.ndarray:
    """Validate and decode index bytes; returns k strictly increasing int64 indices < numel."""
    if mode == BITMAP:
        if data.size != -(-numel // 8):
            raise CodecError(f"index bitmap has {data.size} bytes, {numel} elements need {-(-numel // 8)}")
        bits = np.unpackbits(data, bitorder="little")
        if bits[numel:].any():
            raise CodecError("index bitmap has bits set past the end of the vector")
        idx = np.flatnonzero(bits[:numel])
        if idx.size != k:
            raise CodecError(f"index bitmap marks {idx.size} elements, header says {k}")
        return idx
    if mode != VARINT:
        raise CodecError(f"unknown index coding mode {mode}")
    if k == 0:
        if data.size:
            raise CodecError(f"{data.size} index bytes for zero indices")
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(data < 0x80)
    if ends.size != k or ends[-1] != data.size - 1:
        raise CodecError(f"varint index section holds {ends.size} complete values in {data.size} bytes "
                         f"(a truncated value at the end counts as none), header says {k}")
    starts = np.empty(k, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > _MAX_VARINT_BYTES:
        raise CodecError(f"varint index longer than {_MAX_VARINT_BYTES} bytes")
    # The j-th group of every varint at once, j up to the longest one: loops over byte positions.
    deltas = (data[ends] & 0x7F).astype(np.uint64)  # a varint's last byte is its highest group
    for j in range(1, int(lengths.max())):
        longer = np.flatnonzero(lengths > j)
        deltas[longer] <<= np.uint64(7)
        deltas[longer] |= data[ends[longer] - j] & np.uint8(0x7F)
    # Each delta below numel (<= 2**31) keeps the cumulative sum far from uint64 overflow.
    if deltas.max() >= numel or (deltas[1:] == 0).any():
        raise CodecError("sparse indices out of range or not strictly increasing")
    idx = np.cumsum(deltas).astype(np.int64)
    if idx[-1] >= numel:
        raise CodecError(f"sparse index {idx[-1]} out of range for {numel} elements")
    return idx
