"""Pack unsigned integers of 1..8 bits densely: value i takes bits [b*i, b*(i+1)) of a
little-endian stream of ceil(D*b/8) bytes; 8 values make b whole bytes.

Packing 2 and 4 bits is a compiled loop (jit.py) writing each byte from its 4 or 2 levels; other
widths are one BLAS dot of groups of levels with the powers of two of their bit positions, in
float32 (the sums stay below 2**24, so they are exact), then the sums' low bytes (measured faster
than a compiled loop for those, whose 64-bit words do not vectorise). Unpacking is a compiled loop
over groups of 8 values (b bytes each), as float32: what every decoder multiplies next.

The definition in a few lines, which the tests compare against: ``reference_pack``,
``reference_unpack``.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel


def packed_size(count: int, bits: int) -> int:
    return -(-count * bits // 8)


# Values summed by one float32 dot: at most 24 bits (exact in float32), and 16 where that makes
# whole uint16 words (1, 2 and 4 bits); 3 and 6 bits make 3 bytes, 5 and 7 bits are joined in pairs
# or fours into 5 or 7 bytes of a uint64.
_PER_DOT = {1: 16, 2: 8, 3: 8, 4: 4, 5: 4, 6: 4, 7: 2}
# A float32 array whose length is a multiple of this is packed in place, without a padded copy.
PAD = 16


def _bytes_of_words(words: np.ndarray, nbytes: int) -> np.ndarray:
    """The low ``nbytes`` bytes of each little-endian word, concatenated; the words' higher bytes
    are zero. Each word is stored whole at offset nbytes * i, in increasing i, so its zero high
    bytes land where the next word is stored next (numpy's 1-D strided copy runs forward, and the
    tests compare with the bit-by-bit reference): several times faster than moving
    nbytes-byte items one by one."""
    out = np.empty(nbytes * words.size + words.itemsize, np.uint8)
    np.ndarray(words.shape, words.dtype, out, strides=(nbytes,))[...] = words
    return out[: nbytes * words.size]


def pack(values: np.ndarray, bits: int, count: int | None = None) -> np.ndarray:
    """Levels < 2**bits (float32 integers or any integer dtype) -> uint8 stream of packed_size
    bytes. The first ``count`` values (default: all) are packed; the rest of ``values`` must be 0."""
    count = values.size if count is None else count
    if bits == 8:
        return values[:count].astype(np.uint8)
    if values.dtype != np.float32 or values.size % PAD:
        padded = np.zeros(-(-values.size // PAD) * PAD, np.float32)
        padded[: values.size] = values
        values = padded
    if bits in (2, 4):
        stream = np.empty(values.size * bits // 8, np.uint8)
        _pack_bytes(values, bits, stream)
        return stream[: packed_size(count, bits)]
    per_dot = _PER_DOT[bits]
    sums = np.empty(values.size // per_dot, np.float32)
    np.dot(values.reshape(-1, per_dot), np.ldexp(np.float32(1), bits * np.arange(per_dot)), out=sums)
    dot_bits = bits * per_dot
    if dot_bits == 16:
        stream = sums.astype(np.uint16).view(np.uint8)
    elif dot_bits == 24:
        stream = _bytes_of_words(sums.astype(np.uint32), 3)
    else:
        parts = sums.reshape(-1, 8 // per_dot)
        words = parts[:, 0].astype(np.uint64)
        for k in range(1, parts.shape[1]):
            part = parts[:, k].astype(np.uint64)
            part <<= np.uint64(dot_bits * k)
            words |= part
        stream = _bytes_of_words(words, bits)
    return stream[: packed_size(count, bits)]


@kernel
def _pack_bytes(values: np.ndarray, bits: int, out: np.ndarray) -> None:
    """2 or 4 bits: each byte from its 4 or 2 float32 levels (values.size is a multiple of 8)."""
    if bits == 4:
        for j in range(out.size):
            out[j] = np.uint8(values[2 * j]) | (np.uint8(values[2 * j + 1]) << 4)
    else:
        for j in range(out.size):
            out[j] = (np.uint8(values[4 * j]) | (np.uint8(values[4 * j + 1]) << 2)
                      | (np.uint8(values[4 * j + 2]) << 4) | (np.uint8(values[4 * j + 3]) << 6))


@kernel(inline="always")
def _unpack_words(stream: np.ndarray, bits: int, out: np.ndarray) -> None:
    """Group g of 8 values is bytes [bits g, bits (g + 1)) read as one little-endian word; inlined
    with a constant ``bits``, so that its loops unroll."""
    mask = np.uint64((1 << bits) - 1)
    for g in range(out.size // 8):
        word = np.uint64(0)
        for b in range(bits):
            word |= np.uint64(stream[bits * g + b]) << np.uint64(8 * b)
        for t in range(8):
            out[8 * g + t] = np.float32((word >> np.uint64(bits * t)) & mask)


@kernel
def _unpack(stream: np.ndarray, bits: int, out: np.ndarray) -> None:
    """float32 levels of a stream of whole groups (out.size a multiple of 8, stream bits * out.size / 8 bytes)."""
    if bits == 8:
        for i in range(out.size):
            out[i] = np.float32(stream[i])
    elif bits == 4:
        for j in range(stream.size):
            out[2 * j] = np.float32(stream[j] & 15)
            out[2 * j + 1] = np.float32(stream[j] >> 4)
    elif bits == 2:
        for j in range(stream.size):
            out[4 * j] = np.float32(stream[j] & 3)
            out[4 * j + 1] = np.float32((stream[j] >> 2) & 3)
            out[4 * j + 2] = np.float32((stream[j] >> 4) & 3)
            out[4 * j + 3] = np.float32(stream[j] >> 6)
    elif bits == 1:
        _unpack_words(stream, 1, out)
    elif bits == 3:
        _unpack_words(stream, 3, out)
    elif bits == 5:
        _unpack_words(stream, 5, out)
    elif bits == 6:
        _unpack_words(stream, 6, out)
    else:
        _unpack_words(stream, 7, out)


def unpack_levels(stream: np.ndarray, count: int, bits: int, max_level: int | None = None) -> np.ndarray:
    """Validate a packed stream and return its ``count`` levels as float32; rejects streams of the
    wrong length, non-zero padding bits and (with ``max_level``) levels above it."""
    if stream.size != packed_size(count, bits):
        raise CodecError(
            f"packed stream has {stream.size} bytes, {count} values of {bits} bits need {packed_size(count, bits)}"
        )
    # The padding bits past count*bits all sit in the stream's last byte.
    spare = 8 * stream.size - count * bits
    if spare and stream[-1] >> (8 - spare):
        raise CodecError("packed stream has non-zero padding bits")
    levels = np.empty(-(-count // 8) * 8, np.float32)
    whole = count // 8 * bits  # bytes of the whole groups; the last group's, zero-padded, on its own
    _unpack(stream[:whole], bits, levels[: count // 8 * 8])
    if whole < stream.size:
        tail = np.zeros(bits, np.uint8)
        tail[: stream.size - whole] = stream[whole:]
        _unpack(tail, bits, levels[count // 8 * 8 :])
    levels = levels[:count]
    if max_level is not None and max_level < (1 << bits) - 1 and count and levels.max() > max_level:
        raise CodecError(f"level {int(levels.max())} exceeds the {max_level} levels in the header")
    return levels


# One bit per value (signs, masks): np.packbits's layout, which is pack(values, 1)'s.

def bitmap(mask: np.ndarray) -> np.ndarray:
    """Boolean vector -> ceil(D/8) bytes, bit i of the stream is mask[i]."""
    return np.packbits(mask, bitorder="little")


def bitmap_size(numel: int) -> int:
    return -(-numel // 8)


def read_bitmap(payload: memoryview, offset: int, numel: int, what: str) -> np.ndarray:
    """The bytes of the bitmap at ``offset``, checked for bits past the end of the vector; the
    caller checked the payload length."""
    data = np.frombuffer(payload, np.uint8, bitmap_size(numel), offset)
    if numel % 8 and data[-1] >> (numel % 8):
        raise CodecError(f"{what}: bitmap has bits set past the end of the vector")
    return data


# Row b: the 8 values of bitmap byte b, +1 for a clear bit and -1 for a set one (signs), and 0 or 1 (masks).
SIGNS = np.where(np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"), -1, 1).astype(np.float32)
ONES = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.float32)


def expand(table: np.ndarray, data: np.ndarray, numel: int, out: np.ndarray | None = None) -> np.ndarray:
    """float32 vector of ``numel`` values: each bitmap byte replaced by its table row (into ``out``,
    float32 of 8 * data.size values, when given)."""
    rows = table.take(data, axis=0, out=None if out is None else out.reshape(data.size, 8))
    return rows.reshape(-1)[:numel]


def reference_pack(values: np.ndarray, bits: int) -> np.ndarray:
    """The definition, one bit at a time: bit j of value i is bit b*i + j of the stream."""
    v = np.asarray(values, np.int64)
    stream_bits = ((v[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(stream_bits, bitorder="little")


def reference_unpack(stream: np.ndarray, count: int, bits: int) -> np.ndarray:
    stream_bits = np.unpackbits(stream, bitorder="little")[: count * bits].reshape(count, bits).astype(np.int64)
    return (stream_bits << np.arange(bits)).sum(axis=1)
