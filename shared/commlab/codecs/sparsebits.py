"""Sparse bit streams (qsgdz's signs): the bits of one bitmap at the set bits of a mask bitmap, in
order, packed (bitmaps as bitmaps.bitmap makes them).

Byte tables of x86's pext and pdep (which numba cannot emit): _EXTRACT[m, x] is the bits of x at
the set bits of m, packed low; _DEPOSIT[m, b] the low bits of b spread over the set bits of m;
_COUNT[m] the set bits of m. Row by row, a pass over the mask's bytes with one running bit offset
(a compaction loop over values took four times as long).
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.bitmaps import bitmap_size
from commlab.codecs.jit import kernel


# Row b: the 8 bits of byte b, low bit first.
_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")


def _byte_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(_COUNT, _EXTRACT, _DEPOSIT), from each byte's bits and their ranks among its set bits."""
    bits = _BITS.astype(np.int64)[:, None, :]  # [m, 1, t]
    ranks = np.cumsum(bits, axis=2) - bits
    x, t = np.arange(256)[None, :, None], np.arange(8)
    extract = (bits * ((x >> t) & 1) << ranks).sum(axis=2)
    deposit = (bits * ((x >> ranks) & 1) << t).sum(axis=2)
    return bits.sum(axis=(1, 2)), extract.astype(np.uint8), deposit.astype(np.uint8)


_COUNT, _EXTRACT, _DEPOSIT = _byte_tables()


@kernel
def _extract(mask: np.ndarray, bits: np.ndarray, out: np.ndarray) -> int:
    """The bits of ``bits`` at the set bits of ``mask`` (bitmaps of one size), in order, into
    ``out`` (at least mask.size + 1 bytes, zero padding bits); returns their count. Every byte
    is stored and the write position advances when 8 bits are complete: no branch."""
    pending, held, at = np.int64(0), np.int64(0), 0
    for j in range(mask.size):
        m = mask[j]
        pending |= np.int64(_EXTRACT[m, bits[j]]) << held
        held += _COUNT[m]
        out[at] = pending & 0xFF
        full = np.int64(held >= 8)
        pending >>= 8 * full
        held -= 8 * full
        at += full
    out[at] = pending
    return 8 * at + held


def extract(mask: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Bitmap of the bits of bitmap ``bits`` where bitmap ``mask`` is set, in order (pext)."""
    out = np.empty(mask.size + 1, np.uint8)
    return out[: bitmap_size(_extract(mask, bits, out))]


@kernel
def deposit(mask: np.ndarray, stream: np.ndarray, out: np.ndarray) -> int:
    """The inverse of ``extract`` (pdep): out[j] takes the next bits of ``stream`` at the set bits
    of mask[j]; returns the count of bits read. A read past the end of ``stream`` (not empty)
    takes its last byte: the caller checks its length against the count afterwards."""
    at, last = np.int64(0), stream.size - 1
    for j in range(mask.size):
        m = mask[j]
        byte = at >> 3
        window = (np.int64(stream[min(byte, last)]) | (np.int64(stream[min(byte + 1, last)]) << 8)) >> (at & 7)
        out[j] = _DEPOSIT[m, window & ((1 << _COUNT[m]) - 1)]
        at += _COUNT[m]
    return at
