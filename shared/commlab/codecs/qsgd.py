"""qsgd<s>: bucketed stochastic quantization with s levels (Alistarh et al., 2017), unbiased.
The vector is split into buckets of B values (default 512, as in the paper and GRACE); in a bucket
with norm n, level l_i = floor(s |w_i| / n + u_i), u_i ~ U[0, 1), decoded n * sign_i * l_i / s.
One norm for a whole million-element vector makes the error grow with sqrt(D) (relative error
about 8 on the MNIST CNN, and FL diverges); per-bucket norms bound it by the bucket's own norm.
qsgd<s> sends the float32 bucket norms, a sign bitmap and the levels bit-packed in ceil(log2(s+1))
bits: a fixed size. qsgdz<s> sends the same levels entropy-coded, as the QSGD paper does with Elias
codes: at few levels most levels are 0 (3 levels in buckets of 512: a value sits near 3/sqrt(512)
= 0.13 of a level), so it zstd-compresses the packed levels and keeps signs for the non-zero
levels only; the size depends on the data, so `wire_size` is only a bound (zstd's worst case).

The uniforms u come from draws.py (a counter-based generator under a key drawn from the codec's
Generator per frame), on the 24-bit grid of numpy's float32 draws. Bucket norms are float32 sums of squares,
redone in float64 for the buckets where float32 overflows or loses the small values."""
from __future__ import annotations

import struct

import numpy as np
import zstandard

from commlab.codecs import bitmaps, bitpack, chunks, draws, scratch, sparsebits
from commlab.codecs.base import MAX_MAGNITUDE, RandomCodec, register
from commlab.codecs.errors import CodecError, chunk_size, integer_in
from commlab.codecs.jit import kernel


def _bits(levels: int) -> int:
    return int(levels).bit_length()


@kernel
def _quantize(vec: np.ndarray, bucket: int, norms: np.ndarray, factor: np.ndarray, top: np.float32,
              key: np.ndarray, levels: np.ndarray, negative: np.ndarray) -> None:
    """levels (bytes) = min(floor(|w| * factor + u), s) per bucket, u the frame's uniform of the value
    (draws.uniform under ``key``); buckets whose factor overflowed take |w| / norm * s; negative =
    w < 0 where the level is > 0. One loop over each bucket's own views."""
    for c in range(norms.size):
        start = c * bucket
        span = slice(start, start + bucket)
        x, t, neg, f = vec[span], levels[span], negative[span], factor[c]
        if f == np.inf:
            for i in range(x.size):
                t[i] = np.uint8(np.int32(min(np.floor(abs(x[i]) / norms[c] * top + draws.uniform(key, start + i)), top)))
        else:
            for i in range(x.size):  # int32 then uint8: conversions that vectorise
                t[i] = np.uint8(np.int32(min(np.floor(abs(x[i]) * f + draws.uniform(key, start + i)), top)))
        for i in range(x.size):
            neg[i] = (x[i] < 0) & (t[i] > 0)


@register
class QSGD(RandomCodec):
    name = "qsgd"
    codec_id = 6
    lossy = True
    unbiased = True
    params_struct = struct.Struct("<BI")  # levels, bucket
    suffix_param = "levels"

    def __init__(
        self, levels: int = 16, bucket: int = 512, seed: int | np.random.Generator | None = None, **kw
    ) -> None:
        super().__init__(**kw)
        self.levels = integer_in("qsgd levels", levels, 1, 255)
        self.bucket = chunk_size("qsgd bucket", bucket)
        self.name = f"qsgd{levels}"
        self.rng = np.random.default_rng(seed)

    def _quantize(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(float32 bucket norms, uint8 levels in 0..s zero-padded to a multiple of bitpack.PAD,
        the signs of the non-zero levels as bools); the two arrays are scratch arrays."""
        n, bucket = vec.size, self.bucket
        norms = bucket_norms(vec, bucket)
        if not (norms <= MAX_MAGNITUDE).all():
            raise CodecError(f"{self.name}: values must be finite with bucket norms <= {MAX_MAGNITUDE:g}")
        t = scratch.buffer("qsgd.levels", -(-n // bitpack.PAD) * bitpack.PAD, np.uint8)
        t[n:] = 0
        # s / norm per bucket, rounded once; all-zero buckets keep 0. Where s / norm overflows
        # float32 (tiny norms) the bucket takes |w| / norm first, then times s.
        with np.errstate(divide="ignore", over="ignore"):
            factor = (self.levels / norms.astype(np.float64)).astype(np.float32)
        factor[norms == 0] = 0
        negative = scratch.buffer("qsgd.negative", n, np.bool_)
        _quantize(vec, bucket, norms, factor, np.float32(self.levels), draws.frame_key(self.rng), t[:n], negative)
        return norms, t, negative

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, levels, negative = self._quantize(vec)
        packed = bitpack.pack(levels, _bits(self.levels), vec.size)
        return (self.levels, self.bucket), [norms, np.packbits(negative, bitorder="little"), packed]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        levels, bucket = _check_params(type(self).name, params)
        norm_len = 4 * chunks.count(numel, bucket)
        sign_len = -(-numel // 8)
        expected = norm_len + sign_len + bitpack.packed_size(numel, _bits(levels))
        if len(payload) != expected:
            raise CodecError(
                f"qsgd: payload {len(payload)} bytes, {numel} values at {levels} levels in buckets of {bucket} need {expected}"
            )
        norms = _norms(type(self).name, payload, norm_len)
        signs = bitmaps.read_bitmap(payload, norm_len, numel, "qsgd: sign")
        packed = np.frombuffer(payload, np.uint8, offset=norm_len + sign_len)
        q = _levels(type(self).name, packed, numel, levels)
        return _dequantize(q, signs, norms, levels, bucket)

    def payload_size(self, numel: int) -> int:
        return (4 * chunks.count(numel, self.bucket) + -(-numel // 8)
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


def _levels(name: str, packed: np.ndarray, numel: int, levels: int) -> np.ndarray:
    try:
        return bitpack.unpack_levels(packed, numel, _bits(levels), max_level=levels, dtype=np.uint8)
    except CodecError as e:
        raise CodecError(f"{name}: {e}") from None


def bucket_norms(vec: np.ndarray, bucket: int) -> np.ndarray:
    """float32 L2 norm of each bucket: float32 sums of squares, redone in float64 where they
    overflow, are not finite or fall to where float32 drops the small squares."""
    norms = np.empty(chunks.count(vec.size, bucket), np.float32)
    for span, x in chunks.rows(vec, bucket):
        rows = norms[span]
        np.einsum("ij,ij->i", x, x, out=rows)
        redo = np.flatnonzero(~(rows >= _SQUARES_EXACT_ABOVE) | np.isinf(rows))
        np.sqrt(rows, out=rows)
        if redo.size:
            # float64 accumulation (buffered by einsum, no float64 copy): squares overflow float32.
            rows[redo] = np.sqrt(np.einsum("ij,ij->i", x[redo], x[redo], dtype=np.float64))
    return norms


# Below this a float32 sum of squares may have lost subnormal squares: redo it in float64.
_SQUARES_EXACT_ABOVE = np.float32(2.0**-100)


def reference_dequantize(levels: np.ndarray, signs: np.ndarray, norms: np.ndarray, s: int, bucket: int) -> np.ndarray:
    """The definition: norm * sign * level / s per value, with step = float32(norm / s)."""
    steps = (norms.astype(np.float64) / s).astype(np.float32)
    out = levels.astype(np.float32) * np.repeat(steps, bucket)[: levels.size]
    return np.where(signs.astype(bool), -out, out)


def _steps(norms: np.ndarray, levels: int) -> np.ndarray:
    """A level's value in each bucket, float32(norm / s)."""
    return (norms.astype(np.float64) / levels).astype(np.float32)


def _dequantize(q: np.ndarray, signs: np.ndarray, norms: np.ndarray, levels: int, bucket: int) -> np.ndarray:
    """norm * sign * level / s per value from the byte levels ``q``; ``signs`` is the packed bitmap
    of one bit per value (set: negative)."""
    return bitmaps.scale_signs(q, signs, _steps(norms, levels), bucket)


_LENGTH = struct.Struct("<I")
_NO_SIGNS = np.zeros(1, np.uint8)  # what sparsebits.deposit reads when a frame has no sign bytes
# Packed levels look like random bytes with a skewed histogram: long matches are rare and the
# Huffman coding of the literals does the work, so a small match table (zstd's fast strategy with
# 2**8 entries) loses nothing against zstd's level 1 and spends less time looking for matches.
_ZSTD = zstandard.ZstdCompressionParameters(strategy=zstandard.STRATEGY_FAST, window_log=17, hash_log=8,
                                            chain_log=8, search_log=1, min_match=7, target_length=0)


def _zstd_bound(n: int) -> int:
    """ZSTD_compressBound: the most a zstd frame of n input bytes can take."""
    return n + (n >> 8) + (((128 << 10) - n) >> 11 if n < (128 << 10) else 0)


@register
class QSGDZ(QSGD):
    """qsgd<s>'s quantizer with entropy-coded frames: float32 bucket norms, the zstd frame's
    length (uint32) and the zstd-compressed bit-packed levels, then one sign bit per non-zero level."""
    name = "qsgdz"
    codec_id = 12
    sized_by_content = True

    def __init__(self, levels: int = 16, bucket: int = 512, seed: int | np.random.Generator | None = None, **kw) -> None:
        super().__init__(levels, bucket, seed, **kw)
        self.name = f"qsgdz{levels}"

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, q, negative = self._quantize(vec)
        packed = bitpack.pack(q, _bits(self.levels), vec.size)
        stream = zstandard.ZstdCompressor(compression_params=_ZSTD).compress(packed)
        signs = sparsebits.extract(bitmaps.bitmap(q[: vec.size] > 0), bitmaps.bitmap(negative))
        return (self.levels, self.bucket), [norms, _LENGTH.pack(len(stream)), stream, signs]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        name = type(self).name
        levels, bucket = _check_params(name, params)
        norm_len = 4 * chunks.count(numel, bucket)
        packed_len = bitpack.packed_size(numel, _bits(levels))
        if len(payload) < norm_len + _LENGTH.size:
            raise CodecError(f"{name}: payload {len(payload)} bytes, shorter than {numel} values' "
                             f"{norm_len} bytes of bucket norms and the stream length")
        norms = _norms(name, payload, norm_len)
        (stream_len,) = _LENGTH.unpack_from(payload, norm_len)
        start = norm_len + _LENGTH.size
        if stream_len > len(payload) - start:
            raise CodecError(f"{name}: level stream of {stream_len} bytes overruns the {len(payload)}-byte payload")
        packed = _unzstd(name, payload[start:start + stream_len], packed_len, f"{numel} levels of {_bits(levels)} bits")
        out = _levels(name, np.frombuffer(packed, np.uint8), numel, levels)
        signs = np.frombuffer(payload, np.uint8, offset=start + stream_len)
        # The signs spread over the non-zero levels (one bit per value) and their count, checked
        # before anything returns.
        kept = bitmaps.bitmap(out > 0)
        negative = np.empty(kept.size, np.uint8)
        nonzero = sparsebits.deposit(kept, signs if signs.size else _NO_SIGNS, negative)
        if signs.size != -(-nonzero // 8):
            raise CodecError(f"{name}: {signs.size} sign bytes, {nonzero} non-zero levels need {-(-nonzero // 8)}")
        if nonzero % 8 and signs[-1] >> (nonzero % 8):
            raise CodecError(f"{name}: sign bits set past the last non-zero level")
        return _dequantize(out, negative, norms, levels, bucket)

    def payload_size(self, numel: int) -> int:
        """An upper bound: levels that do not compress, and a sign for every value."""
        return (4 * chunks.count(numel, self.bucket) + _LENGTH.size
                + _zstd_bound(bitpack.packed_size(numel, _bits(self.levels))) + -(-numel // 8))


def _unzstd(name: str, stream: memoryview, size: int, what: str) -> bytes:
    """Decompress one zstd frame that declares and holds exactly ``size`` bytes; anything else (a
    frame declaring more, a decompression bomb, one cut short or followed by other bytes) is rejected
    before more than ``size`` bytes are produced."""
    try:
        declared = zstandard.frame_content_size(stream)
        if declared < 0:  # a frame written without its content size
            raise CodecError(f"{name}: level stream does not declare its size")
        if declared != size:
            raise CodecError(f"{name}: level stream declares {declared} bytes, {what} take {size}")
        return zstandard.ZstdDecompressor().decompress(stream, max_output_size=size, allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise CodecError(f"{name}: level stream is not one valid zstd frame ({e})") from None
