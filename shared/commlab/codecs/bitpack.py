"""Pack unsigned integers of 1..8 bits densely: value i takes bits [b*i, b*(i+1)) of a
little-endian stream of ceil(D*b/8) bytes; 8 values make b whole bytes.

Packing and unpacking are compiled loops (jit.py): for 2, 4 and 8 bits byte by byte; the other
widths in three passes that vectorise (levels to bytes; 8 bytes of levels to one word of 8 b-bit
fields; 8 such words, 64 levels, to b whole 64-bit words), and back the same way (a loop building
each group's bytes from its float32 levels took twice as long). Levels come in as float32 or
bytes (what the encoders round to) and go out as float32 (what minmax multiplies next) or as
bytes (qsgd's dequantizing loop converts them itself, one pass fewer); the decoders' check of
the largest level comes from the pass that writes floats, or (bytes) the one that writes them. (A BLAS dot of groups of levels with the powers
of two of their bit positions packed some widths faster on an idle machine, but BLAS's threads
slowed it tenfold while other processes ran.)

The definition in a few lines, which the tests compare against: ``reference_pack``,
``reference_unpack``.
"""
from __future__ import annotations

import numpy as np
from numba import literal_unroll

from commlab.codecs import scratch
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel


def packed_size(count: int, bits: int) -> int:
    return -(-count * bits // 8)


# A float32 array whose length is a multiple of this is packed in place, without a padded copy
# (the word widths pack runs of 64 levels).
PAD = 64
_RUN = 64  # levels a run: ``bits`` whole 64-bit words of the stream
# The widths packed through 64-bit words (the others byte by byte).
_WORD_WIDTHS = (1, 3, 5, 6, 7)


def pack(values: np.ndarray, bits: int, count: int | None = None) -> np.ndarray:
    """Levels < 2**bits (float32 integers or any integer dtype) -> uint8 stream of packed_size
    bytes. The first ``count`` values (default: all) are packed; the rest of ``values`` must be 0.
    Float32 or uint8 levels whose length is a multiple of PAD are packed without a copy."""
    count = values.size if count is None else count
    if bits == 8:
        return values[:count].astype(np.uint8)
    if values.dtype not in (np.float32, np.uint8) or values.size % PAD:
        padded = np.zeros(-(-values.size // PAD) * PAD, np.float32)
        padded[: values.size] = values
        values = padded
    stream = np.empty(values.size * bits // 8, np.uint8)
    if bits in _WORD_WIDTHS:
        levels = values
        if values.dtype != np.uint8:
            levels = scratch.buffer("bitpack.levels", values.size, np.uint8)
            _to_bytes(values, levels)
        groups = scratch.buffer("bitpack.groups", values.size // 8, np.uint64)
        _fields(levels.view(np.uint64), bits, groups)
        _join(groups, bits, stream)
    else:
        _pack(values, bits, stream)
    return stream[: packed_size(count, bits)]


@kernel
def _to_bytes(values: np.ndarray, out: np.ndarray) -> None:
    for i in range(values.size):
        out[i] = np.uint8(np.int32(values[i]))  # int32: a conversion that vectorises


@kernel
def _to_floats(levels: np.ndarray, out: np.ndarray) -> int:
    """float32 levels from byte levels, and the largest level (the check of the decoders' maximum
    level, in the same pass)."""
    top = np.uint8(0)
    for i in range(levels.size):
        top = max(top, levels[i])
        out[i] = np.float32(np.int32(levels[i]))  # a third faster than numpy's cast
    return top


@kernel(inline="always")
def _pairings(bits: int) -> tuple[np.uint64, np.uint64, np.uint64]:
    """The masks of one b-bit field in every 16-bit lane, of 2 b bits in every 32-bit lane and of
    4 b bits in the word: what _fields joins and _bytes_of_fields splits at each of its steps."""
    return (np.uint64(((1 << bits) - 1) * 0x0001000100010001), np.uint64(((1 << (2 * bits)) - 1) * 0x0000000100000001),
            np.uint64((1 << (4 * bits)) - 1))


@kernel
def _fields(lanes: np.ndarray, bits: int, out: np.ndarray) -> None:
    """Each word of 8 byte levels -> one word of 8 ``bits``-bit fields, level t at bit bits * t:
    the levels joined in pairs in each 16-bit lane, the pairs in each 32-bit lane, then the two
    halves (three shifts and masks a word, where a field at a time took eight: half the time)."""
    pair, quad, half = _pairings(bits)
    b = np.uint64(bits)
    for g in range(lanes.size):
        x = lanes[g]
        x = (x & pair) | ((x >> np.uint64(8 - bits)) & (pair << b))
        x = (x & quad) | ((x >> np.uint64(16 - 2 * bits)) & (quad << (b + b)))
        out[g] = (x & half) | ((x >> np.uint64(32 - 4 * bits)) & (half << (4 * b)))


@kernel(inline="always")
def _join_words(groups: np.ndarray, bits: int, out: np.ndarray) -> None:
    """Each run of 8 group words (8 bits bits each) -> ``bits`` 64-bit words of the stream: word j
    holds stream bits [64 j, 64 j + 64), from the groups that overlap them; inlined with a
    constant ``bits``, so that the loops unroll and every shift and test is a constant."""
    words = out.view(np.uint64)
    for r in range(groups.size // 8):
        g8, w = groups[8 * r : 8 * r + 8], words[bits * r : bits * r + bits]
        for j in range(bits):
            word = np.uint64(0)
            for g in range(8):
                shift = 8 * bits * g - 64 * j
                if 0 <= shift < 64:
                    word |= g8[g] << np.uint64(shift)
                elif -8 * bits < shift < 0:
                    word |= g8[g] >> np.uint64(-shift)
            w[j] = word


@kernel
def _join(groups: np.ndarray, bits: int, out: np.ndarray) -> None:
    """The stream of ``bits`` * groups.size bytes from group words (groups.size a multiple of 8)."""
    for width in literal_unroll(_WORD_WIDTHS):  # a copy of the loop per width, each unrolled
        if bits == width:
            _join_words(groups, width, out)


@kernel
def _pack(values: np.ndarray, bits: int, out: np.ndarray) -> None:
    """Levels of 4 or 2 bits (values.size a multiple of 8) -> the stream of bits * values.size / 8 bytes."""
    if bits == 4:
        for j in range(out.size):
            out[j] = np.uint8(values[2 * j]) | (np.uint8(values[2 * j + 1]) << 4)
    else:
        for j in range(out.size):
            out[j] = (np.uint8(values[4 * j]) | (np.uint8(values[4 * j + 1]) << 2)
                      | (np.uint8(values[4 * j + 2]) << 4) | (np.uint8(values[4 * j + 3]) << 6))


@kernel(inline="always")
def _split_words(stream: np.ndarray, bits: int, groups: np.ndarray) -> None:
    """The inverse of _join_words: each run of ``bits`` 64-bit stream words -> 8 group words."""
    words, mask = stream.view(np.uint64), np.uint64((1 << (8 * bits)) - 1)
    for r in range(groups.size // 8):
        w, g8 = words[bits * r : bits * r + bits], groups[8 * r : 8 * r + 8]
        for g in range(8):
            start = 8 * bits * g
            word = w[start // 64] >> np.uint64(start % 64)
            if start % 64 + 8 * bits > 64:
                word |= w[start // 64 + 1] << np.uint64(64 - start % 64)
            g8[g] = word & mask


@kernel
def _split(stream: np.ndarray, bits: int, groups: np.ndarray) -> None:
    for width in literal_unroll(_WORD_WIDTHS):
        if bits == width:
            _split_words(stream, width, groups)


_BYTES = np.uint64(0x0101010101010101)  # 1 in every byte of a word


@kernel
def _bytes_of_fields(groups: np.ndarray, bits: int, lanes: np.ndarray, limit: int) -> bool:
    """The inverse of _fields: each word of 8 ``bits``-bit fields -> a word of 8 byte levels, its
    steps undone in reverse order; and whether a level exceeds ``limit`` (0..127), in the same
    pass: a byte x < 128 plus 127 - limit carries into its top bit exactly when x > limit, with
    no carry into the next byte (a pass of its own over the levels took a sixth of unpacking)."""
    pair, quad, half = _pairings(bits)
    add, over = np.uint64(127 - limit) * _BYTES, np.uint64(0)
    for g in range(groups.size):
        x = groups[g]
        x = (x & half) | ((x << np.uint64(32 - 4 * bits)) & (half << np.uint64(32)))
        x = (x & quad) | ((x << np.uint64(16 - 2 * bits)) & (quad << np.uint64(16)))
        x = (x & pair) | ((x << np.uint64(8 - bits)) & (pair << np.uint64(8)))
        over |= x + add
        lanes[g] = x
    return over & (np.uint64(0x80) * _BYTES) != 0


@kernel
def _unpack(stream: np.ndarray, bits: int, out: np.ndarray) -> None:
    """Levels of 8, 4 or 2 bits (float32 or bytes, as ``out``) from a stream of bits * out.size / 8 bytes."""
    if bits == 8:
        for i in range(out.size):
            out[i] = stream[i]
    elif bits == 4:
        for j in range(stream.size):
            out[2 * j] = stream[j] & 15
            out[2 * j + 1] = stream[j] >> 4
    else:
        for j in range(stream.size):
            out[4 * j] = stream[j] & 3
            out[4 * j + 1] = (stream[j] >> 2) & 3
            out[4 * j + 2] = (stream[j] >> 4) & 3
            out[4 * j + 3] = stream[j] >> 6


def _unpack_runs(stream: np.ndarray, bits: int, out: np.ndarray, limit: int) -> int:
    """Levels (float32 or bytes, as ``out``) of whole runs (out.size a multiple of _RUN) from
    bits * out.size / 8 bytes, and the largest level where one exceeds ``limit`` (else at most
    ``limit``)."""
    if bits not in _WORD_WIDTHS:
        _unpack(stream, bits, out)
        return int(out.max(initial=0)) if limit < (1 << bits) - 1 else 0
    groups = scratch.buffer("bitpack.groups", out.size // 8, np.uint64)
    # The stream's words where they lie in the frame, mostly not 8-byte aligned: unaligned loads
    # cost x86 nothing, where copying the stream to an aligned buffer took a tenth of qsgd's decoding.
    _split(stream.view(np.uint64), bits, groups)
    if out.dtype == np.uint8:
        return int(out.max()) if _bytes_of_fields(groups, bits, out.view(np.uint64), limit) else 0
    levels = scratch.buffer("bitpack.levels", out.size, np.uint8)
    _bytes_of_fields(groups, bits, levels.view(np.uint64), (1 << bits) - 1)
    return _to_floats(levels, out)


def unpack_levels(stream: np.ndarray, count: int, bits: int, max_level: int | None = None,
                  dtype: type = np.float32) -> np.ndarray:
    """Validate a packed stream and return its ``count`` levels as float32 (or as bytes, with
    ``dtype=np.uint8``); rejects streams of the wrong length, non-zero padding bits and (with
    ``max_level``) levels above it."""
    if stream.size != packed_size(count, bits):
        raise CodecError(
            f"packed stream has {stream.size} bytes, {count} values of {bits} bits need {packed_size(count, bits)}"
        )
    # The padding bits past count*bits all sit in the stream's last byte.
    spare = 8 * stream.size - count * bits
    if spare and stream[-1] >> (8 - spare):
        raise CodecError("packed stream has non-zero padding bits")
    levels = np.empty(-(-count // _RUN) * _RUN, dtype)
    runs = count // _RUN
    whole = runs * _RUN * bits // 8  # bytes of the whole runs; the last run's, zero-padded, on its own
    limit = (1 << bits) - 1 if max_level is None else min(max_level, (1 << bits) - 1)
    top = _unpack_runs(stream[:whole], bits, levels[: runs * _RUN], limit)
    if whole < stream.size:
        tail = np.zeros(_RUN * bits // 8, np.uint8)
        tail[: stream.size - whole] = stream[whole:]
        top = max(top, _unpack_runs(tail, bits, levels[runs * _RUN :], limit))
    if top > limit:
        raise CodecError(f"level {top} exceeds the {max_level} levels in the header")
    return levels[:count]


def reference_pack(values: np.ndarray, bits: int) -> np.ndarray:
    """The definition, one bit at a time: bit j of value i is bit b*i + j of the stream."""
    v = np.asarray(values, np.int64)
    stream_bits = ((v[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(stream_bits, bitorder="little")


def reference_unpack(stream: np.ndarray, count: int, bits: int) -> np.ndarray:
    stream_bits = np.unpackbits(stream, bitorder="little")[: count * bits].reshape(count, bits).astype(np.int64)
    return (stream_bits << np.arange(bits)).sum(axis=1)
