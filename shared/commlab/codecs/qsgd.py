"""qsgd<s>: bucketed stochastic quantization with s levels (Alistarh et al., 2017), unbiased.
The vector is split into buckets of B values (default 512, as in the paper and GRACE); in a bucket
with norm n, level l_i = floor(s |w_i| / n + u_i), u_i ~ U[0, 1), decoded n * sign_i * l_i / s.
One norm for a whole million-element vector makes the error grow with sqrt(D) (relative error
about 8 on the MNIST CNN, and FL diverges); per-bucket norms bound it by the bucket's own norm.
qsgd<s> sends the float32 bucket norms, a sign bitmap and the levels bit-packed in ceil(log2(s+1))
bits: a fixed size. qsgdz<s> (qsgdz.py) sends the same levels entropy-coded: at few levels most
levels are 0 (3 levels in buckets of 512: a value sits near 3/sqrt(512) = 0.13 of a level).

The uniforms u come from draws.py (a counter-based generator under a key drawn from the codec's
Generator per frame), on the 24-bit grid of numpy's float32 draws. Bucket norms are the square roots of
float32 sums of squares added in a fixed order of 16 lanes (squares.py; before, numpy's einsum
added them in an order of its own, so a norm's last bits may differ from frames of then), redone
in float64 (the same order) for the buckets where float32 overflows or loses the small values. One
compiled pass per bucket takes its norm, levels and sign bits while the bucket is in L1."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import bitmaps, bitpack, chunks, draws, lanes, scratch, squares
from commlab.codecs.base import MAX_MAGNITUDE, RandomCodec, register
from commlab.codecs.bitmaps import WORD  # values of one 64-bit word of the sign bitmap
from commlab.codecs.errors import CodecError, chunk_size, integer_in
from commlab.codecs.jit import kernel


def _bits(levels: int) -> int:
    return int(levels).bit_length()


@kernel(inline="always")
def _bucket_norm(vec: np.ndarray, start: int, count: int) -> np.float32:
    """float32 L2 norm of vec[start:start + count]: its float32 sum of squares in 16 lanes
    (squares.py), redone in float64 where that overflows, is not finite or falls to where float32
    drops the small squares."""
    total = squares.sum_squares(vec, start, count)
    if total >= _SQUARES_EXACT_ABOVE and total != np.inf:
        return np.sqrt(total)
    return np.float32(np.sqrt(squares.sum_squares_wide(vec, start, count)))


# Below this a float32 sum of squares may have lost subnormal squares: redo it in float64.
_SQUARES_EXACT_ABOVE = np.float32(2.0**-100)
_MAGNITUDE = np.uint32(0x7FFFFFFF)  # above it, a float32's bits have the sign bit set


@kernel(inline="always")
def _sign_word(bits: np.ndarray, levels: np.ndarray, start: int) -> np.uint64:
    """The sign bitmap's word of values start..start + 63: a bit where the value's sign bit is set
    and its level is not 0 (-0.0 takes level 0); four 16-lane compares and one of 64 bytes."""
    word = np.uint64(0)
    for q in range(4):
        word |= np.uint64(lanes.above(bits, start + 16 * q, _MAGNITUDE)) << np.uint64(16 * q)
    return word & ~lanes.equal_64(levels, start, 0)


@kernel
def _quantize(vec: np.ndarray, bucket: int, top: np.float32, key: np.ndarray, norms: np.ndarray,
              levels: np.ndarray, negative: np.ndarray) -> int:
    """Per bucket, read from memory once: its norm, then levels (bytes) = min(floor(|w| * factor
    + u), s) with factor = float32(s / norm) (0 for an all-zero bucket), u the frame's uniform of
    the value (draws.uniform under ``key``), or |w| / norm * s where the factor overflows; then the
    words of the sign bitmap ``negative`` (uint64) that the bucket completes. Returns the number
    of buckets done: fewer than norms.size when a bucket's norm is not finite or above MAX_MAGNITUDE.
    ``levels`` is zero past vec.size up to a multiple of 64. The sum is never negative, so its
    truncation to int32 is the floor, with no rounding instruction of its own."""
    n, bits, done = vec.size, vec.view(np.uint32), 0
    for c in range(norms.size):
        start = c * bucket
        stop = min(start + bucket, n)
        norm = _bucket_norm(vec, start, stop - start)
        if not norm <= MAX_MAGNITUDE:
            return c
        norms[c] = norm
        x, t = vec[start:stop], levels[start:stop]
        f = np.float32(top / np.float64(norm)) if norm > 0 else np.float32(0)
        if f == np.inf:
            for i in range(x.size):
                t[i] = np.uint8(np.int32(min(abs(x[i]) / norm * top + draws.uniform(key, start + i), top)))
        else:
            for i in range(x.size):  # int32 then uint8: conversions that vectorise
                t[i] = np.uint8(np.int32(min(abs(x[i]) * f + draws.uniform(key, start + i), top)))
        while WORD * (done + 1) <= stop:
            negative[done] = _sign_word(bits, levels, WORD * done)
            done += 1
    if WORD * done < n:  # the last, partial word: one value at a time
        word = np.uint64(0)
        for i in range(WORD * done, n):
            word |= np.uint64((vec[i] < 0) & (levels[i] > 0)) << np.uint64(i - WORD * done)
        negative[done] = word
    return norms.size


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
        the sign bitmap's ceil(D/64) little-endian words, a bit set for a negative value of
        non-zero level); the last two are scratch arrays."""
        n = vec.size
        norms = np.empty(chunks.count(n, self.bucket), np.float32)
        t = scratch.buffer("qsgd.levels", -(-n // bitpack.PAD) * bitpack.PAD, np.uint8)
        t[n:] = 0
        negative = scratch.buffer("qsgd.negative", -(-n // WORD), np.uint64)
        done = _quantize(vec, self.bucket, np.float32(self.levels), draws.frame_key(self.rng), norms, t, negative)
        if done < norms.size:
            raise CodecError(f"{self.name}: values must be finite with bucket norms <= {MAX_MAGNITUDE:g}")
        return norms, t, negative

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, levels, negative = self._quantize(vec)
        return (self.levels, self.bucket), dense_parts(norms, levels, negative, self.levels, vec.size)

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        levels, bucket = check_params(type(self).name, params)
        return decode_dense(type(self).name, numel, levels, bucket, payload)

    def payload_size(self, numel: int) -> int:
        return dense_size(numel, self.levels, self.bucket)


def dense_size(numel: int, levels: int, bucket: int) -> int:
    """qsgd<s>'s payload bytes: the bucket norms, the sign bitmap, the bit-packed levels."""
    return 4 * chunks.count(numel, bucket) + bitmaps.bitmap_size(numel) + bitpack.packed_size(numel, _bits(levels))


def dense_parts(norms: np.ndarray, q: np.ndarray, negative: np.ndarray, levels: int, numel: int) -> list:
    """qsgd<s>'s payload sections from the quantizer's output (QSGD._quantize)."""
    return [norms, negative.view(np.uint8)[: bitmaps.bitmap_size(numel)], bitpack.pack(q, _bits(levels), numel)]


def decode_dense(name: str, numel: int, levels: int, bucket: int, payload: memoryview) -> np.ndarray:
    """The vector of qsgd<s>'s payload, validated."""
    norm_len = 4 * chunks.count(numel, bucket)
    expected = dense_size(numel, levels, bucket)
    if len(payload) != expected:
        raise CodecError(
            f"{name}: payload {len(payload)} bytes, {numel} values at {levels} levels in buckets of {bucket} need {expected}"
        )
    norms = read_norms(name, payload, norm_len)
    signs = bitmaps.read_bitmap(payload, norm_len, numel, f"{name}: sign")
    packed = np.frombuffer(payload, np.uint8, offset=norm_len + bitmaps.bitmap_size(numel))
    q = _levels(name, packed, numel, levels)
    return _dequantize(q, signs, norms, levels, bucket)


def check_params(name: str, params: tuple) -> tuple[int, int]:
    """(levels, bucket) of a qsgd frame's parameters, neither of them 0."""
    levels, bucket = params
    if levels == 0:
        raise CodecError(f"{name}: 0 levels in frame")
    if bucket == 0:
        raise CodecError(f"{name}: bucket size 0 in frame")
    return levels, bucket


def read_norms(name: str, payload: memoryview, norm_len: int) -> np.ndarray:
    """The bucket norms at the start of a qsgd payload, each checked finite, >= 0 and <= MAX_MAGNITUDE."""
    norms = np.frombuffer(payload, "<f4", norm_len // 4)
    if not ((norms >= 0) & (norms <= MAX_MAGNITUDE)).all():
        raise CodecError(f"{name}: bucket norms must be finite, non-negative and <= {MAX_MAGNITUDE:g}")
    return norms


def _levels(name: str, packed: np.ndarray, numel: int, levels: int) -> np.ndarray:
    try:
        return bitpack.unpack_levels(packed, numel, _bits(levels), max_level=levels, dtype=np.uint8)
    except CodecError as e:
        raise CodecError(f"{name}: {e}") from None


def reference_dequantize(levels: np.ndarray, signs: np.ndarray, norms: np.ndarray, s: int, bucket: int) -> np.ndarray:
    """The definition: norm * sign * level / s per value, with step = float32(norm / s)."""
    steps = (norms.astype(np.float64) / s).astype(np.float32)
    out = levels.astype(np.float32) * np.repeat(steps, bucket)[: levels.size]
    return np.where(signs.astype(bool), -out, out)


def level_steps(norms: np.ndarray, levels: int) -> np.ndarray:
    """A level's value in each bucket, float32(norm / s)."""
    return (norms.astype(np.float64) / levels).astype(np.float32)


def _dequantize(q: np.ndarray, signs: np.ndarray, norms: np.ndarray, levels: int, bucket: int) -> np.ndarray:
    """norm * sign * level / s per value from the byte levels ``q``; ``signs`` is the packed bitmap
    of one bit per value (set: negative)."""
    return bitmaps.scale_signs(q, signs, level_steps(norms, levels), bucket)
