"""One bit per value (signs, masks) in np.packbits's layout, which is bitpack.pack(values, 1)'s,
and the sign decoders' compiled passes over such bitmaps (signsgd, terngrad, qsgd): each value's
float32 bits from its block's scale, its sign bit and, where a mask says so, zero."""
from __future__ import annotations

import numpy as np

from commlab.codecs import lanes
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel


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


_SIGN, _ONE = np.uint32(31), np.uint64(1)
WORD = 64  # values whose bits one 64-bit word of a bitmap holds


@kernel(inline="always")
def _bitmap_word(bitmap: np.ndarray, j: int) -> np.uint64:
    """Bytes 8j..8j+7 of a bitmap as one little-endian word: the bits of values 64j..64j+63."""
    word = np.uint64(0)
    for b in range(8):
        word |= np.uint64(bitmap[8 * j + b]) << np.uint64(8 * b)
    return word


@kernel(inline="always")
def _bit(bitmap: np.ndarray, i: int) -> np.uint32:
    return np.uint32((bitmap[i >> 3] >> (i & 7)) & 1)


# signsgd's and terngrad's decoders read their bitmaps a 64-bit word at a time, 64 values a loop of
# constant length that LLVM vectorises (numpy's unpacking to a byte a value, then a loop over those bytes, took half
# as long again; reading bit i of byte i // 8, two to three times as long). A word within one block
# takes its scale; one across a block boundary, and the values past whole words, each value's own.
# qsgd's takes 16 values a mask of two bitmap bytes (the 64-lane loop of its products and signs,
# vectorised by LLVM over 64-bit lanes, took two thirds longer).

@kernel
def _signed_scales(negative: np.ndarray, nonzero: np.ndarray, masked: bool, scales: np.ndarray, block: int,
                   out: np.ndarray) -> None:
    """out (as uint32 words): the bits of the value's block's scale, cleared where its ``nonzero``
    bit is clear (when ``masked``), with its ``negative`` bit as the sign bit."""
    words, scale_bits = out.view(np.uint32), scales.view(np.uint32)
    for j in range(out.size // WORD):
        start = WORD * j
        y, neg = words[start : start + WORD], _bitmap_word(negative, j)
        keep = _bitmap_word(nonzero, j) if masked else ~np.uint64(0)
        if start // block == (start + WORD - 1) // block:
            s = scale_bits[start // block]
            if masked:
                for t in range(WORD):
                    y[t] = (s & (np.uint32(0) - np.uint32((keep >> np.uint64(t)) & _ONE))) | (
                        np.uint32((neg >> np.uint64(t)) & _ONE) << _SIGN)
            else:
                for t in range(WORD):
                    y[t] = s | (np.uint32((neg >> np.uint64(t)) & _ONE) << _SIGN)
        else:
            for t in range(WORD):
                kept = np.uint32((keep >> np.uint64(t)) & _ONE)
                y[t] = (scale_bits[(start + t) // block] & (np.uint32(0) - kept)) | (
                    np.uint32((neg >> np.uint64(t)) & _ONE) << _SIGN)
    for i in range(out.size // WORD * WORD, out.size):
        kept = _bit(nonzero, i) if masked else np.uint32(1)
        words[i] = (scale_bits[i // block] & (np.uint32(0) - kept)) | (_bit(negative, i) << _SIGN)


@kernel(inline="always")
def _sign(bit: np.uint32) -> np.float32:
    return np.float32(1) - np.float32(2) * np.float32(bit)


@kernel
def _scale_signs(levels: np.ndarray, negative: np.ndarray, scales: np.ndarray, block: int, out: np.ndarray) -> None:
    """``levels`` times their block's scale, then times -1 where their ``negative`` bit is set:
    16 values at a time (lanes.scale_signed, the sign from two bytes of the bitmap) where they
    share a block, one at a time across a block boundary and past the last 16. The block's end
    is tracked as the loop goes (an integer division per 16 values took a third of the time)."""
    c, end = 0, block
    for j in range(out.size // lanes.LANES):
        start = lanes.LANES * j
        while start >= end:
            c, end = c + 1, end + block
        if start + lanes.LANES <= end:
            mask = np.uint32(negative[2 * j]) | (np.uint32(negative[2 * j + 1]) << np.uint32(8))
            lanes.scale_signed(levels, start, scales[c], mask, out)
        else:
            for i in range(start, start + lanes.LANES):
                out[i] = np.float32(levels[i]) * scales[i // block] * _sign(_bit(negative, i))
    for i in range(out.size // lanes.LANES * lanes.LANES, out.size):
        out[i] = np.float32(levels[i]) * scales[i // block] * _sign(_bit(negative, i))


def signed_scales(negative: np.ndarray, scales: np.ndarray, block: int, numel: int,
                  nonzero: np.ndarray | None = None) -> np.ndarray:
    """float32 vector of ``numel`` values from bitmaps of ceil(numel / 8) bytes: value i is
    scales[i // block], negative where its ``negative`` bit is set, and +0 where its ``nonzero``
    bit (when given) is clear (a clear ``nonzero`` bit has a clear ``negative`` one)."""
    out = np.empty(numel, np.float32)
    _signed_scales(negative, negative if nonzero is None else nonzero, nonzero is not None, scales, block, out)
    return out


def scale_signs(levels: np.ndarray, negative: np.ndarray, scales: np.ndarray, block: int) -> np.ndarray:
    """float32 vector of the non-negative ``levels`` (bytes) times scales[i // block], negated
    where bit i of the ``negative`` bitmap is set."""
    out = np.empty(levels.size, np.float32)
    _scale_signs(levels, negative, scales, block, out)
    return out
