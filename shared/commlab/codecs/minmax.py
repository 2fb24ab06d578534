"""minmax<n>: chunked min-max quantization to n = 1..8 bits, bit-packed.
Per chunk of C values (default 8192; 256 for 1 and 2 bits) scale = (max - min) / (2**n - 1), q = round((w - min) / scale),
decoded min + q * scale. One min and scale for a whole million-value model delta leaves 2**n levels
over the range of its few outliers: every other value is off by up to scale/2, and with error
feedback the residual grows round after round (FL diverges); per-chunk ranges bound it by the
chunk's own range, as int8's per-chunk scales do. The payload is the (min, scale) float32 pairs of
the chunks, then all levels bit-packed as one stream: 8 ceil(D/C) + ceil(nD/8) bytes.
With 2 bits there is no level at zero: over chunks of 8192 the error of real FL round deltas was
2.8-7.2x their norm (error feedback diverged), over chunks of 256 0.47-0.82x (FL 10 rounds -0.04 pp
against fp32), for 0.070x the fp32 bytes instead of 0.063x."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import bitpack, chunks, scratch
from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError, chunk_size, integer_in
from commlab.codecs.jit import kernel

_TINY = np.finfo(np.float32).tiny  # below it 1/scale overflows float32


def _max_scale(bits: int) -> np.float32:
    """The largest scale the encoder can produce (the same float32 rounding of a range of at most
    2 * MAX_MAGNITUDE), so |min| + q * scale stays below float32 max for every level q."""
    return np.float32(2 * MAX_MAGNITUDE / ((1 << bits) - 1))


@kernel
def _ranges(vec: np.ndarray, chunk: int, lo: np.ndarray, hi: np.ndarray) -> None:
    """Min and max per chunk, as integer min and max (vectorised, unlike float ones) of keys
    ordered as the floats: the bits, with the magnitude bits flipped for negative values (-0.0
    below 0.0, NaN beyond the infinities, so NaN comes out as a min or a max)."""
    keys = vec.view(np.int32)
    for c in range(lo.size):
        k = keys[c * chunk : (c + 1) * chunk]
        low, high = np.int32(2**31 - 1), np.int32(-(2**31))
        for i in range(k.size):  # numpy's scalar ufuncs: 32-bit operations (Python's widen to 64), which vectorise
            key = np.bitwise_xor(k[i], np.bitwise_and(np.right_shift(k[i], np.int32(31)), np.int32(0x7FFFFFFF)))
            low, high = np.minimum(low, key), np.maximum(high, key)
        lo[c : c + 1].view(np.int32)[0] = low ^ ((low >> 31) & np.int32(0x7FFFFFFF))
        hi[c : c + 1].view(np.int32)[0] = high ^ ((high >> 31) & np.int32(0x7FFFFFFF))


@kernel
def _levels(vec: np.ndarray, chunk: int, lo: np.ndarray, inv: np.ndarray, scale: np.ndarray, top: float,
            out: np.ndarray) -> None:
    """out (bytes) = min(rint((w - min) * inv), top) per chunk; chunks with a subnormal scale (inv
    0, scale > 0) divide by the scale instead. One pass over chunk views (which LLVM vectorises;
    int32 then uint8: conversions that vectorise)."""
    for c in range(lo.size):
        x, y, low, factor = vec[c * chunk : (c + 1) * chunk], out[c * chunk : (c + 1) * chunk], lo[c], inv[c]
        if factor == 0 and scale[c] > 0:
            for i in range(x.size):
                y[i] = np.uint8(np.int32(min(np.rint((x[i] - low) / scale[c]), top)))
        else:
            for i in range(x.size):
                y[i] = np.uint8(np.int32(min(np.rint((x[i] - low) * factor), top)))


@kernel
def _values(levels: np.ndarray, chunk: int, lo: np.ndarray, scale: np.ndarray) -> None:
    """levels = min + level * scale per chunk, in place (two roundings, as the definition)."""
    for c in range(lo.size):
        y, low, step = levels[c * chunk : (c + 1) * chunk], lo[c], scale[c]
        for i in range(y.size):
            y[i] = y[i] * step + low


def reference_levels(vec: np.ndarray, bits: int, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The definition, chunk by chunk, for chunks whose 1 / scale is finite in float32: (min,
    scale = (max - min) / (2**n - 1) rounded once from float64, levels = min(rint((w - min) * (1 /
    scale)), 2**n - 1), 0 in a constant chunk)."""
    top, lows, scales, levels = (1 << bits) - 1, [], [], []
    for a in range(0, vec.size, chunk):
        x = vec[a : a + chunk]
        scale = np.float32((np.float64(x.max()) - np.float64(x.min())) / top)
        inv = np.float32(1) / scale if scale > 0 else np.float32(0)
        lows.append(x.min())
        scales.append(scale)
        levels.append(np.minimum(np.rint((x - x.min()) * inv), top))
    return np.array(lows, np.float32), np.array(scales, np.float32), np.concatenate(levels)


@register
class MinMax(Codec):
    name = "minmax"
    codec_id = 5
    lossy = True
    params_struct = struct.Struct("<BI")  # bits, chunk
    suffix_param = "bits"

    def __init__(self, bits: int = 8, chunk: int | None = None, **kw) -> None:
        super().__init__(**kw)
        if chunk is None:
            chunk = 256 if bits in (1, 2) else 8192
        self.bits = integer_in("minmax bits", bits, 1, 8)
        self.chunk = chunk_size("minmax chunk", chunk)
        self.name = f"minmax{bits}"

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        top = (1 << self.bits) - 1
        head = np.empty((chunks.count(vec.size, self.chunk), 2), np.float32)  # (min, scale) per chunk
        lo, hi = head[:, 0], np.empty(len(head), np.float32)
        _ranges(vec, self.chunk, lo, hi)
        for c in np.flatnonzero((lo == 0) | (hi == 0)):  # the sign of a zero min or max: numpy's
            lo[c], hi[c] = vec[c * self.chunk : (c + 1) * self.chunk].min(), vec[c * self.chunk : (c + 1) * self.chunk].max()
        if not ((np.abs(lo) <= MAX_MAGNITUDE) & (np.abs(hi) <= MAX_MAGNITUDE)).all():  # NaN fails too
            raise CodecError(f"{self.name}: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
        scale = head[:, 1]
        scale[:] = (hi.astype(np.float64) - lo) / top
        # Multiply by the reciprocal; chunks with a subnormal scale (1/scale overflows) divide,
        # constant chunks (scale 0) keep level 0.
        inv = np.zeros_like(scale)
        np.divide(1, scale, out=inv, where=scale >= _TINY)
        padded = scratch.buffer("minmax.levels", -(-vec.size // bitpack.PAD) * bitpack.PAD, np.uint8)
        padded[vec.size :] = 0
        _levels(vec, self.chunk, lo, inv, scale, np.float32(top), padded[: vec.size])
        return (self.bits, self.chunk), [head, bitpack.pack(padded, self.bits, vec.size)]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        bits, chunk = params
        if not 1 <= bits <= 8:
            raise CodecError(f"minmax: {bits} bits in frame, must be 1..8")
        if chunk == 0:
            raise CodecError("minmax: chunk size 0 in frame")
        nchunks = chunks.count(numel, chunk)
        expected = 8 * nchunks + bitpack.packed_size(numel, bits)
        if len(payload) != expected:
            raise CodecError(f"minmax: payload {len(payload)} bytes, {numel} values of {bits} bits "
                             f"in chunks of {chunk} need {expected}")
        head = np.frombuffer(payload, "<f4", 2 * nchunks).reshape(nchunks, 2)
        lo, scale = head[:, 0], head[:, 1]
        if not (np.abs(lo) <= MAX_MAGNITUDE).all():
            raise CodecError(f"minmax: chunk minima must be finite with magnitude <= {MAX_MAGNITUDE:g}")
        if not ((scale >= 0) & (scale <= _max_scale(bits))).all():
            raise CodecError(f"minmax: scales must be finite, non-negative and <= {_max_scale(bits):g}")
        try:
            out = bitpack.unpack_levels(np.frombuffer(payload, np.uint8, offset=8 * nchunks), numel, bits)
        except CodecError as e:
            raise CodecError(f"minmax: {e}") from None
        _values(out, chunk, lo, scale)
        return out

    def payload_size(self, numel: int) -> int:
        return 8 * chunks.count(numel, self.chunk) + bitpack.packed_size(numel, self.bits)
