"""int8: chunked absmax quantization. Per chunk of C values s = max|w|/127, q = round(w/s) in
[-127, 127]; the payload is the float32 scales then the int8 levels, about D + 4D/C bytes."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError

# Rows of chunks processed at once: keeps the float32 temporary (~1 MiB) in cache.
_BLOCK_ELEMS = 1 << 18
# The largest scale the encoder can produce (same float32 rounding), so q * s stays finite.
_MAX_SCALE = np.float32(MAX_MAGNITUDE) / np.float32(127)


def _num_chunks(numel: int, chunk: int) -> int:
    return -(-numel // chunk)


def quantize(vec: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (scales float32 [ceil(D/C)], levels int8 [D]); raises CodecError on non-finite input."""
    n = vec.size
    scales = np.empty(_num_chunks(n, chunk), np.float32)
    q = np.empty(n, np.int8)
    rows = max(1, _BLOCK_ELEMS // chunk)
    tmp = np.empty(min(n, rows * chunk), np.float32)
    for start in range(0, n, rows * chunk):
        stop = min(n, start + rows * chunk)
        # Full chunks as a 2-D view, then the ragged tail chunk as one row of its own.
        full = (stop - start) // chunk * chunk
        for lo, hi, width in ((start, start + full, chunk), (start + full, stop, stop - start - full)):
            if hi == lo:
                continue
            x = vec[lo:hi].reshape(-1, width)
            amax = np.maximum(x.max(axis=1), -x.min(axis=1))
            if not (amax <= MAX_MAGNITUDE).all():
                raise CodecError(f"int8: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
            first = lo // chunk
            np.divide(amax, 127, out=scales[first : first + len(amax)])
            t = tmp[: hi - lo].reshape(x.shape)
            with np.errstate(over="ignore", invalid="ignore"):  # the tiny rows are redone below
                inv = np.divide(127, amax, out=np.zeros_like(amax), where=amax > 0)
                np.multiply(x, inv[:, None], out=t)
            tiny = np.isinf(inv)
            if tiny.any():  # subnormal chunks: 127/amax overflows, divide by the scale instead
                s = scales[first : first + len(amax)][tiny, None]
                t[tiny] = np.divide(x[tiny], s, out=np.zeros_like(x[tiny]), where=s > 0)
            np.rint(t, out=t)
            np.copyto(q[lo:hi].reshape(x.shape), t, casting="unsafe")
    return scales, q


def dequantize(scales: np.ndarray, q: np.ndarray, chunk: int) -> np.ndarray:
    """Inverse of quantize: q * s per chunk, float32."""
    n = q.size
    out = np.empty(n, np.float32)
    full = n // chunk * chunk
    if full:
        np.multiply(q[:full].reshape(-1, chunk), scales[: full // chunk, None], out=out[:full].reshape(-1, chunk))
    if full < n:
        np.multiply(q[full:], scales[-1], out=out[full:])
    return out


def check_chunk(chunk: int) -> int:
    if not isinstance(chunk, int) or not 1 <= chunk < 2**32:
        raise CodecError(f"int8 chunk must be an integer in [1, 2**32), got {chunk!r}")
    return chunk


def read_quantized(payload: memoryview, count: int, chunk: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Split and validate the scales+levels section of a payload holding ``count`` values."""
    nchunks = _num_chunks(count, chunk)
    if len(payload) != 4 * nchunks + count:
        raise CodecError(f"{what}: {len(payload)} bytes of values, {count} values in chunks of {chunk} need {4 * nchunks + count}")
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
        self.chunk = check_chunk(chunk)

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
