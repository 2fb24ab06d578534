"""int8: chunked absmax quantization. Per chunk of C values s = max|w|/127, q = round(w/s) in
[-127, 127]; the payload is the float32 scales then the int8 levels, about D + 4D/C bytes."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError, chunk_size
from commlab.codecs.jit import kernel

# The largest scale the encoder can produce (same float32 rounding), so q * s stays finite.
_MAX_SCALE = np.float32(MAX_MAGNITUDE) / np.float32(127)


def _num_chunks(numel: int, chunk: int) -> int:
    return -(-numel // chunk)


@kernel
def _quantize(vec: np.ndarray, chunk: int, amax: np.ndarray, q: np.ndarray) -> None:
    """Per chunk, while it is in cache: amax = max |w| (an integer max of the bits without the
    sign: vectorised, and NaN comes out above inf), then q = rint(w * 127 / amax) as int8. Chunks
    whose amax is 0, NaN, too large or subnormal (127 / amax overflows) keep q = 0 here."""
    keys, amax_bits = vec.view(np.uint32), amax.view(np.uint32)
    for c in range(amax.size):
        # Loops over a chunk's own views (not offsets into the whole arrays) are the ones LLVM vectorises.
        x, k, y = vec[c * chunk : (c + 1) * chunk], keys[c * chunk : (c + 1) * chunk], q[c * chunk : (c + 1) * chunk]
        top = np.uint32(0)
        for i in range(k.size):  # numpy's scalar ufuncs: 32-bit operations, which vectorise
            top = np.maximum(top, np.bitwise_and(k[i], np.uint32(0x7FFFFFFF)))
        amax_bits[c] = top
        factor = np.float32(127) / amax[c] if 0 < amax[c] <= MAX_MAGNITUDE else np.float32(0)
        if factor == np.inf:
            factor = np.float32(0)
        for i in range(x.size):
            y[i] = np.int8(np.rint(x[i] * factor))


@kernel
def _values(q: np.ndarray, chunk: int, scales: np.ndarray, out: np.ndarray) -> None:
    """out = float32(q) * s per chunk."""
    for c in range(scales.size):
        x, y, scale = q[c * chunk : (c + 1) * chunk], out[c * chunk : (c + 1) * chunk], scales[c]
        for i in range(x.size):
            y[i] = np.float32(x[i]) * scale


def quantize(vec: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (scales float32 [ceil(D/C)], levels int8 [D]); raises CodecError on non-finite input."""
    amax = np.empty(_num_chunks(vec.size, chunk), np.float32)
    q = np.empty(vec.size, np.int8)
    _quantize(vec, chunk, amax, q)
    if not (amax <= MAX_MAGNITUDE).all():  # NaN fails too
        raise CodecError(f"int8: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
    scales = amax / np.float32(127)
    with np.errstate(divide="ignore", over="ignore"):
        subnormal = np.flatnonzero(np.isinf(np.float32(127) / amax))
    for c in subnormal:  # rare: subnormal amax (or 0, whose levels stay 0), where 127/amax overflows
        part = slice(c * chunk, (c + 1) * chunk)
        t = np.divide(vec[part], scales[c], out=np.zeros_like(vec[part]), where=scales[c] > 0)
        # The subnormal scale is rounded, so |w/s| may exceed 127: clip as the definition says.
        np.copyto(q[part], np.clip(np.rint(t), -127, 127), casting="unsafe")
    return scales, q


def reference_quantize(vec: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The definition, chunk by chunk, for chunks whose 127 / max|w| is finite in float32:
    s = max|w| / 127, q = rint(w * (127 / max|w|)) (q = 0 in an all-zero chunk)."""
    scales, levels = [], []
    for a in range(0, vec.size, chunk):
        amax = np.abs(vec[a : a + chunk]).max()
        factor = np.float32(127) / amax if amax > 0 else np.float32(0)
        scales.append(amax / np.float32(127))
        levels.append(np.rint(vec[a : a + chunk] * factor).astype(np.int8))
    return np.array(scales, np.float32), np.concatenate(levels)


def dequantize(scales: np.ndarray, q: np.ndarray, chunk: int) -> np.ndarray:
    """Inverse of quantize: q * s per chunk, float32."""
    out = np.empty(q.size, np.float32)
    _values(q, chunk, scales, out)
    return out


def read_quantized(payload: memoryview, count: int, chunk: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Split and validate the scales+levels section of a payload holding ``count`` values."""
    nchunks = _num_chunks(count, chunk)
    if len(payload) != 4 * nchunks + count:
        raise CodecError(
            f"{what}: {len(payload)} bytes of values, {count} values in chunks of {chunk} need {4 * nchunks + count}"
        )
    scales = np.frombuffer(payload, "<f4", nchunks)
    if not ((scales >= 0) & (scales <= _MAX_SCALE)).all():
        raise CodecError(f"{what}: scales must be finite, non-negative and <= {_MAX_SCALE:g}")
    q = np.frombuffer(payload, np.int8, count, offset=4 * nchunks)
    if count and q.min() < -127:
        raise CodecError(f"{what}: level -128 is outside the symmetric range [-127, 127]")
    return scales, q


@register
class Int8(Codec):
    name = "int8"
    codec_id = 2
    lossy = True
    params_struct = struct.Struct("<I")  # chunk

    def __init__(self, chunk: int = 8192, **kw) -> None:
        super().__init__(**kw)
        self.chunk = chunk_size("int8 chunk", chunk)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        scales, q = quantize(vec, self.chunk)
        return (self.chunk,), [scales, q]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        (chunk,) = params
        if chunk == 0:
            raise CodecError("int8: chunk size 0 in frame")
        return dequantize(*read_quantized(payload, numel, chunk, "int8"), chunk)

    def payload_size(self, numel: int) -> int:
        return 4 * _num_chunks(numel, self.chunk) + numel
