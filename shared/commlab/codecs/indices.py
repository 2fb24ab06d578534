"""Compact coding of sorted sparse indices: delta + LEB128 varint, or a bitmap, whichever is smaller.

Varints are written and read by compiled loops (jit.py), one pass over the indices or bytes.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs import lanes
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.lanes import LANES

VARINT = 0
BITMAP = 1
_MAX_VARINT_BYTES = 5  # numel <= 2**31, so a delta needs at most 5 groups of 7 bits


def varint_len(value: int) -> int:
    return max(1, -(-int(value).bit_length() // 7))


def bound(numel: int, k: int) -> int:
    """Upper bound of ``encode`` output for k indices below numel."""
    return min(-(-numel // 8), k * varint_len(max(numel - 1, 0)))


@kernel
def _write_varints(idx: np.ndarray, out: np.ndarray) -> int:
    """LEB128 of each delta into ``out`` (16 bytes longer than the varints); returns their bytes:
    7 bits a byte, low groups first, the high bit set on all but the last. 16 deltas at a time
    where all 16 are below 0x80 (lanes.byte_deltas: one vector subtraction; most of top-k's),
    the others one by one. ``idx``: int32."""
    at, j = 0, 0
    while j < idx.size:
        if 0 < j <= idx.size - LANES and lanes.byte_deltas(idx, j, out, at) == 0xFFFF:
            at, j = at + LANES, j + LANES
            continue
        delta = idx[j] - idx[j - 1] if j else idx[0]
        while delta >= 0x80:
            out[at] = (delta & 0x7F) | 0x80
            delta >>= 7
            at += 1
        out[at] = delta
        at, j = at + 1, j + 1
    return at


@kernel(inline="always")
def _mark(masks: np.ndarray, position: int) -> None:
    """Set the bit of ``position`` in its block's uint16 mask."""
    masks[position >> 4] |= np.uint16(1) << np.uint16(position & 15)


# What _read_varints found wrong (bits of its result), in the order the errors are reported.
_TOO_LONG, _NOT_INCREASING, _BEYOND = 1, 2, 4


@kernel
def _read_varints(data: np.ndarray, numel: int, count: int, out: np.ndarray, masks: np.ndarray) -> tuple[int, int]:
    """Decode ``count`` varints (the caller checked that data holds exactly that many complete
    ones) into their cumulative sums: into ``out`` and/or as bits of ``masks`` (one uint16 per 16
    positions; an empty array for either that is not wanted); return (the _TOO_LONG |
    _NOT_INCREASING | _BEYOND found, the last sum). A sum past the vector marks nothing."""
    errors, at, total, j = 0, 0, 0, 0
    while j < count:
        # 16 one-byte deltas, none zero, that cannot reach the vector's end: no check per value.
        if (0 < j <= count - LANES and total + LANES * 0x7F < numel
                and lanes.below(data, at, 0x80) == 0xFFFF and lanes.equal(data, at, 0) == 0):
            for i in range(LANES):
                total += data[at + i]
                if out.size:
                    out[j + i] = total
                if masks.size:
                    _mark(masks, total)
            at, j = at + LANES, j + LANES
            continue
        delta, shift, length = 0, 0, 0
        while True:
            byte = data[at]
            at += 1
            length += 1
            if length <= _MAX_VARINT_BYTES:
                delta |= np.int64(byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        if length > _MAX_VARINT_BYTES:
            errors |= _TOO_LONG
        elif delta >= numel or (j > 0 and delta == 0):
            errors |= _NOT_INCREASING
        else:
            total += delta
        if out.size:
            out[j] = total
        if masks.size and total < numel:
            _mark(masks, total)
        j += 1
    if count and total >= numel:
        errors |= _BEYOND
    return errors, total


def encode(idx: np.ndarray, numel: int) -> tuple[int, np.ndarray]:
    """Strictly increasing indices below numel (<= 2**31, wire.MAX_NUMEL) -> (mode, uint8 bytes)."""
    positions = np.asarray(idx, np.int32)  # below numel: every one fits
    out = np.empty(positions.size * varint_len(max(numel - 1, 0)) + LANES, np.uint8)
    total = _write_varints(positions, out)
    if -(-numel // 8) < total:
        mask = np.zeros(numel, bool)
        mask[positions] = True
        return BITMAP, np.packbits(mask, bitorder="little")
    return VARINT, out[:total]


def decode(mode: int, data: np.ndarray, numel: int, k: int) -> np.ndarray:
    """Validate and decode index bytes; returns k strictly increasing int64 indices < numel."""
    if mode == BITMAP:
        return np.flatnonzero(_bitmap_bits(data, numel, k))
    idx = np.empty(k, np.int64)
    _varints(mode, data, numel, k, idx, _NO_MASKS)
    return idx


def decode_masks(mode: int, data: np.ndarray, numel: int, k: int) -> np.ndarray:
    """Validate index bytes as ``decode`` does; returns the positions as one uint16 mask per 16
    values, bit j of mask b for position 16 b + j (what lanes.spread_blocks spreads values over),
    with no list of positions written and read back."""
    masks = np.zeros(-(-numel // LANES), np.uint16)
    if mode == BITMAP:
        _bitmap_bits(data, numel, k)
        masks.view(np.uint8)[: data.size] = data  # the bitmap's bytes are the masks' (little-endian)
    else:
        _varints(mode, data, numel, k, _NO_POSITIONS, masks)
    return masks


# What _read_varints is given for an output that is not wanted.
_NO_POSITIONS, _NO_MASKS = np.zeros(0, np.int64), np.zeros(0, np.uint16)


def _bitmap_bits(data: np.ndarray, numel: int, k: int) -> np.ndarray:
    """A bitmap section's bits, one byte each, checked: its size, no bit past the vector, k set."""
    if data.size != -(-numel // 8):
        raise CodecError(f"index bitmap has {data.size} bytes, {numel} elements need {-(-numel // 8)}")
    bits = np.unpackbits(data, bitorder="little")
    if bits[numel:].any():
        raise CodecError("index bitmap has bits set past the end of the vector")
    marked = np.count_nonzero(bits)
    if marked != k:
        raise CodecError(f"index bitmap marks {marked} elements, header says {k}")
    return bits[:numel]


def _varints(mode: int, data: np.ndarray, numel: int, k: int, out: np.ndarray, masks: np.ndarray) -> None:
    """Validate a varint section of k positions and decode it into ``out`` and/or ``masks``
    (_read_varints)."""
    if mode != VARINT:
        raise CodecError(f"unknown index coding mode {mode}")
    if k == 0:
        if data.size:
            raise CodecError(f"{data.size} index bytes for zero indices")
        return
    ends = np.count_nonzero(data < 0x80)
    if ends != k or data[-1] >= 0x80:
        raise CodecError(f"varint index section holds {ends} complete values in {data.size} bytes "
                         f"(a truncated value at the end counts as none), header says {k}")
    errors, last = _read_varints(data, numel, k, out, masks)
    if errors & _TOO_LONG:
        raise CodecError(f"varint index longer than {_MAX_VARINT_BYTES} bytes")
    # Each delta below numel (<= 2**31) keeps the cumulative sum far from int64 overflow.
    if errors & _NOT_INCREASING:
        raise CodecError("sparse indices out of range or not strictly increasing")
    if errors & _BEYOND:
        raise CodecError(f"sparse index {last} out of range for {numel} elements")
