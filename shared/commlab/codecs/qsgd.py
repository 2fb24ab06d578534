"""qsgd<s>: bucketed stochastic quantization with s levels (Alistarh et al., 2017), unbiased.
The vector is split into buckets of B values (default 512, as in the paper and GRACE); in a bucket
with norm n, level l_i = floor(s |w_i| / n + u_i), u_i ~ U[0, 1), decoded n * sign_i * l_i / s.
One norm for a whole million-element vector makes the error grow with sqrt(D) (relative error
about 8 on the MNIST CNN, and FL diverges); per-bucket norms bound it by the bucket's own norm.
qsgd<s> sends the float32 bucket norms, a sign bitmap and the levels bit-packed in ceil(log2(s+1))
bits: a fixed size. qsgdz<s> sends the same levels entropy-coded, as the QSGD paper does with Elias
codes: at few levels most levels are 0 (3 levels in buckets of 512: a value sits near 3/sqrt(512)
= 0.13 of a level), so it deflates the packed levels and keeps signs for the non-zero levels only.
On an MNIST CNN update 2-bit frames shrink from 0.64 MB to about 0.15 MB (int8_sparse: 0.33 MB);
the size depends on the data, so `wire_size` is only a bound (deflate's worst case)."""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np

from commlab.codecs import bitpack
from commlab.codecs.base import MAX_MAGNITUDE, RandomCodec, register
from commlab.codecs.errors import CodecError


def _bits(levels: int) -> int:
    return int(levels).bit_length()


def _num_buckets(numel: int, bucket: int) -> int:
    return -(-numel // bucket)


def _spans(n: int, bucket: int) -> Iterator[tuple[int, int, int]]:
    """(start, stop, row width): all whole buckets as one 2-D view, then the ragged last bucket."""
    full = n // bucket * bucket
    if full:
        yield 0, full, bucket
    if full < n:
        yield full, n, n - full


@register
class QSGD(RandomCodec):
    name = "qsgd"
    codec_id = 6
    lossy = True
    unbiased = True
    params_struct = struct.Struct("<BI")  # levels, bucket
    suffix_param = "levels"
    seeded_by_node = True

    def __init__(
        self, levels: int = 16, bucket: int = 512, seed: int | np.random.Generator | None = None, **kw
    ) -> None:
        super().__init__(**kw)
        if not isinstance(levels, int) or not 1 <= levels <= 255:
            raise CodecError(f"qsgd levels must be an integer in 1..255, got {levels!r}")
        if not isinstance(bucket, int) or not 1 <= bucket < 2**32:
            raise CodecError(f"qsgd bucket must be an integer in [1, 2**32), got {bucket!r}")
        self.levels = levels
        self.bucket = bucket
        self.name = f"qsgd{levels}"
        self.rng = np.random.default_rng(seed)

    def _quantize(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(float32 bucket norms, uint8 levels in 0..s); the sign is the vector's where a level is > 0."""
        n, bucket = vec.size, self.bucket
        norms = np.empty(_num_buckets(n, bucket), np.float32)
        t = np.abs(vec)
        for a, b, width in _spans(n, bucket):
            x, tx = vec[a:b].reshape(-1, width), t[a:b].reshape(-1, width)
            # float64 accumulation (buffered by einsum, no float64 copy): squares overflow float32.
            norm64 = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
            if not (norm64 <= MAX_MAGNITUDE).all():
                raise CodecError(f"{self.name}: values must be finite with bucket norms <= {MAX_MAGNITUDE:g}")
            rows = norms[a // bucket : a // bucket + len(x)]
            rows[:] = norm64
            # Divide first: levels / norm overflows float32 for tiny norms; zero buckets stay 0.
            np.divide(tx, rows[:, None], out=tx, where=rows[:, None] > 0)
        t *= np.float32(self.levels)
        t += self.rng.random(n, dtype=np.float32)
        np.floor(t, out=t)
        # Rounding of the float32 norm can push |w|/norm a hair above 1.
        np.minimum(t, self.levels, out=t)
        return norms, t.astype(np.uint8)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, q = self._quantize(vec)
        signs = np.packbits((vec < 0) & (q > 0), bitorder="little")
        return (self.levels, self.bucket), [norms, signs, bitpack.pack(q, _bits(self.levels))]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        levels, bucket = _check_params(type(self).name, params)
        norm_len = 4 * _num_buckets(numel, bucket)
        sign_len = -(-numel // 8)
        expected = norm_len + sign_len + bitpack.packed_size(numel, _bits(levels))
        if len(payload) != expected:
            raise CodecError(
                f"qsgd: payload {len(payload)} bytes, {numel} values at {levels} levels in buckets of {bucket} need {expected}"
            )
        norms = _norms(type(self).name, payload, norm_len)
        sign_bits = np.unpackbits(np.frombuffer(payload, np.uint8, sign_len, norm_len), bitorder="little")
        if sign_bits[numel:].any():
            raise CodecError("qsgd: sign bitmap has bits set past the end of the vector")
        packed = np.frombuffer(payload, np.uint8, offset=norm_len + sign_len)
        q = _levels(type(self).name, bitpack.unpack(packed, numel, _bits(levels)), levels)
        return _dequantize(q, sign_bits[:numel].astype(bool), norms, levels, bucket)

    def payload_size(self, numel: int) -> int:
        return (4 * _num_buckets(numel, self.bucket) + -(-numel // 8)
                + bitpack.packed_size(numel, _bits(self.levels)))


def _check_params(name: str, params: tuple) -> tuple[int, int]:
    levels, bucket = params
    if levels == 0:
        raise CodecError(f"{name}: 0 levels in frame")
    if bucket == 0:
        raise CodecError(f"{name}: bucket size 0 in frame")
    return levels, bucket


def _norms(name: str, payload: memoryview, norm_len: int) -> np.ndarray:
    norms = np.frombuffer(payload, "<f4", norm_len // 4)
    if not ((norms >= 0) & (norms <= MAX_MAGNITUDE)).all():
        raise CodecError(f"{name}: bucket norms must be finite, non-negative and <= {MAX_MAGNITUDE:g}")
    return norms


def _levels(name: str, q: np.ndarray, levels: int) -> np.ndarray:
    if q.size and q.max() > levels:
        raise CodecError(f"{name}: level {q.max()} exceeds the {levels} levels in the header")
    return q


def _dequantize(q: np.ndarray, negative: np.ndarray, norms: np.ndarray, levels: int, bucket: int) -> np.ndarray:
    """norm * sign * level / s per value, in float32."""
    out = q.astype(np.float32)
    steps = (norms.astype(np.float64) / levels).astype(np.float32)
    for a, b, width in _spans(q.size, bucket):
        o = out[a:b].reshape(-1, width)
        o *= steps[a // bucket : a // bucket + len(o), None]
    np.negative(out, out=out, where=negative)
    return out


_LENGTH = struct.Struct("<I")
_DEFLATE_LEVEL = 6  # zlib's default: 2-bit levels of an MNIST CNN update in about 40 ms, 0.12 MB


def _deflate_bound(n: int) -> int:
    """zlib's compressBound: the most a zlib stream of n input bytes can take."""
    return n + (n >> 12) + (n >> 14) + (n >> 25) + 13


@register
class QSGDZ(QSGD):
    """qsgd<s>'s quantizer with entropy-coded frames: float32 bucket norms, the zlib stream's
    length (uint32) and the zlib-deflated bit-packed levels, then one sign bit per non-zero level."""
    name = "qsgdz"
    codec_id = 12
    sized_by_content = True

    def __init__(self, levels: int = 16, bucket: int = 512, seed: int | np.random.Generator | None = None, **kw) -> None:
        super().__init__(levels, bucket, seed, **kw)
        self.name = f"qsgdz{levels}"

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, q = self._quantize(vec)
        nonzero = q > 0
        deflated = zlib.compress(bitpack.pack(q, _bits(self.levels)), _DEFLATE_LEVEL)
        signs = np.packbits(vec[nonzero] < 0, bitorder="little")
        return (self.levels, self.bucket), [norms, _LENGTH.pack(len(deflated)), deflated, signs]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        levels, bucket = _check_params(type(self).name, params)
        norm_len = 4 * _num_buckets(numel, bucket)
        packed_len = bitpack.packed_size(numel, _bits(levels))
        if len(payload) < norm_len + _LENGTH.size:
            raise CodecError(f"{type(self).name}: payload {len(payload)} bytes, shorter than {numel} values' "
                             f"{norm_len} bytes of bucket norms and the stream length")
        norms = _norms(type(self).name, payload, norm_len)
        (deflated_len,) = _LENGTH.unpack_from(payload, norm_len)
        start = norm_len + _LENGTH.size
        if deflated_len > len(payload) - start:
            raise CodecError(f"{type(self).name}: level stream of {deflated_len} bytes overruns the {len(payload)}-byte payload")
        # Never inflate more than the levels can take: a stream that would (a zip bomb) or that
        # stops short or carries bytes past its end is rejected.
        inflater = zlib.decompressobj()
        try:
            packed = inflater.decompress(payload[start:start + deflated_len], packed_len)
        except zlib.error as e:
            raise CodecError(f"{type(self).name}: level stream is not valid deflate data ({e})") from None
        if len(packed) != packed_len or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
            raise CodecError(f"{type(self).name}: level stream does not inflate to exactly the {packed_len} bytes "
                             f"of {numel} levels of {_bits(levels)} bits")
        q = _levels(type(self).name, bitpack.unpack(np.frombuffer(packed, np.uint8), numel, _bits(levels)), levels)
        nonzero = np.flatnonzero(q)
        signs = np.frombuffer(payload, np.uint8, offset=start + deflated_len)
        if signs.size != -(-nonzero.size // 8):
            raise CodecError(f"{type(self).name}: {signs.size} sign bytes, {nonzero.size} non-zero levels need "
                             f"{-(-nonzero.size // 8)}")
        sign_bits = np.unpackbits(signs, bitorder="little")
        if sign_bits[nonzero.size:].any():
            raise CodecError(f"{type(self).name}: sign bits set past the last non-zero level")
        negative = np.zeros(numel, bool)
        negative[nonzero] = sign_bits[:nonzero.size].astype(bool)
        return _dequantize(q, negative, norms, levels, bucket)

    def payload_size(self, numel: int) -> int:
        """An upper bound: levels that do not deflate, and a sign for every value."""
        return (4 * _num_buckets(numel, self.bucket) + _LENGTH.size
                + _deflate_bound(bitpack.packed_size(numel, _bits(self.levels))) + -(-numel // 8))
