"""qsgd<s>: bucketed stochastic quantization with s levels (Alistarh et al., 2017), unbiased.
The vector is split into buckets of B values (default 512, as in the paper and GRACE); in a bucket
with norm n, level l_i = floor(s |w_i| / n + u_i), u_i ~ U[0, 1), decoded n * sign_i * l_i / s.
One norm for a whole million-element vector makes the error grow with sqrt(D) (relative error
about 8 on the MNIST CNN, and FL diverges); per-bucket norms bound it by the bucket's own norm.
qsgd<s> sends the float32 bucket norms, a sign bitmap and the levels bit-packed in ceil(log2(s+1))
bits: a fixed size. qsgdz<s> sends the same levels entropy-coded, as the QSGD paper does with Elias
codes: at few levels most levels are 0 (3 levels in buckets of 512: a value sits near 3/sqrt(512)
= 0.13 of a level) and most others 1, so it sends Rice codes (rice.py) of the runs of zero levels,
a sign per non-zero level and the levels above 1 only; at many levels most are non-zero, and a
Rice code of each value's level is smaller; where most levels are non-zero and near s, qsgd<s>'s
payload is. It sends the smallest of the three (layouts: QSGDZ); the size depends on the data, so
`wire_size` is only a bound, that of qsgd<s>'s payload.

The uniforms u come from draws.py (a counter-based generator under a key drawn from the codec's
Generator per frame), on the 24-bit grid of numpy's float32 draws. Bucket norms are the square roots of
float32 sums of squares added in a fixed order of 16 lanes (squares.py; before, numpy's einsum
added them in an order of its own, so a norm's last bits may differ from frames of then), redone
in float64 (the same order) for the buckets where float32 overflows or loses the small values. One
compiled pass per bucket takes its norm, levels and sign bits while the bucket is in L1."""
from __future__ import annotations

import struct

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from commlab.codecs import bitmaps, bitpack, chunks, draws, lanes, rice, scratch, squares
from commlab.codecs.base import MAX_MAGNITUDE, RandomCodec, register
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
_WORD = 64  # values of one 64-bit word of the sign bitmap
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
    ``levels`` is zero past vec.size up to a multiple of 64."""
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
                t[i] = np.uint8(np.int32(min(np.floor(abs(x[i]) / norm * top + draws.uniform(key, start + i)), top)))
        else:
            for i in range(x.size):  # int32 then uint8: conversions that vectorise
                t[i] = np.uint8(np.int32(min(np.floor(abs(x[i]) * f + draws.uniform(key, start + i)), top)))
        while _WORD * (done + 1) <= stop:
            negative[done] = _sign_word(bits, levels, _WORD * done)
            done += 1
    if _WORD * done < n:  # the last, partial word: one value at a time
        word = np.uint64(0)
        for i in range(_WORD * done, n):
            word |= np.uint64((vec[i] < 0) & (levels[i] > 0)) << np.uint64(i - _WORD * done)
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
        the sign bitmap: ceil(D/8) bytes, a bit set for a negative value of non-zero level); the
        last two are scratch arrays."""
        n = vec.size
        norms = np.empty(chunks.count(n, self.bucket), np.float32)
        t = scratch.buffer("qsgd.levels", -(-n // bitpack.PAD) * bitpack.PAD, np.uint8)
        t[n:] = 0
        negative = scratch.buffer("qsgd.negative", -(-n // _WORD), np.uint64)
        done = _quantize(vec, self.bucket, np.float32(self.levels), draws.frame_key(self.rng), norms, t, negative)
        if done < norms.size:
            raise CodecError(f"{self.name}: values must be finite with bucket norms <= {MAX_MAGNITUDE:g}")
        return norms, t, negative.view(np.uint8)[: bitmaps.bitmap_size(n)]

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, levels, negative = self._quantize(vec)
        return (self.levels, self.bucket), _dense_parts(norms, levels, negative, self.levels, vec.size)

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        levels, bucket = _check_params(type(self).name, params)
        return _decode_dense(type(self).name, numel, levels, bucket, payload)

    def payload_size(self, numel: int) -> int:
        return _dense_size(numel, self.levels, self.bucket)


def _dense_size(numel: int, levels: int, bucket: int) -> int:
    """qsgd<s>'s payload bytes: the bucket norms, the sign bitmap, the bit-packed levels."""
    return 4 * chunks.count(numel, bucket) + bitmaps.bitmap_size(numel) + bitpack.packed_size(numel, _bits(levels))


def _dense_parts(norms: np.ndarray, q: np.ndarray, negative: np.ndarray, levels: int, numel: int) -> list:
    """qsgd<s>'s payload sections from the quantizer's output (QSGD._quantize)."""
    return [norms, negative, bitpack.pack(q, _bits(levels), numel)]


def _decode_dense(name: str, numel: int, levels: int, bucket: int, payload: memoryview) -> np.ndarray:
    """The vector of qsgd<s>'s payload, validated."""
    norm_len = 4 * chunks.count(numel, bucket)
    expected = _dense_size(numel, levels, bucket)
    if len(payload) != expected:
        raise CodecError(
            f"{name}: payload {len(payload)} bytes, {numel} values at {levels} levels in buckets of {bucket} need {expected}"
        )
    norms = _norms(name, payload, norm_len)
    signs = bitmaps.read_bitmap(payload, norm_len, numel, f"{name}: sign")
    packed = np.frombuffer(payload, np.uint8, offset=norm_len + bitmaps.bitmap_size(numel))
    q = _levels(name, packed, numel, levels)
    return _dequantize(q, signs, norms, levels, bucket)


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


@kernel
def _level_counts(levels: np.ndarray) -> tuple[int, int, int]:
    """(levels above 0, levels above 1, sum of the levels above 1) of byte levels (zero-padded
    to a multiple of 64), what picks a frame's Rice parameters: 64 at a time, counting the
    bits of two compares, and the sum only in the blocks that have levels above 1."""
    nonzero, big, total = 0, 0, 0
    for first in range(0, levels.size, _WORD):
        nonzero += lanes.popcount(~lanes.equal_64(levels, first, 0))
        above = lanes.popcount(~lanes.below_64(levels, first, 2))
        if above:
            big += above
            for i in range(first, first + _WORD):
                total += np.int64(levels[i]) if levels[i] > 1 else 0
    return nonzero, big, total


@kernel(inline="always")
def _ones_before_big(levels: np.ndarray, start: int, n: int) -> int:
    """The levels equal to 1 from ``start`` up to the next level above 1 (or to ``n``), 64 at a
    time (``levels`` zero past n up to a multiple of 64)."""
    count, block, low = 0, start // _WORD, np.uint64(start % _WORD)
    while _WORD * block < n:
        first = _WORD * block
        nonzero = ~lanes.equal_64(levels, first, 0) >> low << low
        big = ~lanes.below_64(levels, first, 2) >> low << low
        if big:
            return count + lanes.popcount(nonzero & ((big & (~big + np.uint64(1))) - np.uint64(1)))
        count += lanes.popcount(nonzero)
        block, low = block + 1, np.uint64(0)
    return count


@kernel
def _code_levels(levels: np.ndarray, negative: np.ndarray, n: int, k_gap: int, k_run: int, k_level: int,
                 out: np.ndarray) -> int:
    """qsgdz's stream (see QSGDZ) of the first ``n`` byte levels (zero past n up to a multiple of
    64) and the sign bitmap ``negative`` (bytes) into the words ``out``; returns its bits. The
    non-zero levels are found 64 at a time (one compare of 64 bytes, then their set bits)."""
    acc, used, at = rice.put_code(out, np.uint64(0), 0, 0, _ones_before_big(levels, 0, n), k_run)
    after = 0  # the position after the last non-zero level
    for block in range(-(-n // _WORD)):
        first = _WORD * block
        nonzero = ~lanes.equal_64(levels, first, 0)
        while nonzero:
            i = first + np.int64(trailing_zeros(nonzero))
            nonzero &= nonzero - np.uint64(1)
            sign = (negative[np.uint64(i) >> np.uint64(3)] >> np.uint64(i & 7)) & 1
            acc, used, at = rice.put_code_and_bit(out, acc, used, at, i - after, k_gap, sign, 1)
            after = i + 1
            if levels[np.uint64(i)] > 1:
                acc, used, at = rice.put_code(out, acc, used, at, np.int64(levels[np.uint64(i)]) - 2, k_level)
                acc, used, at = rice.put_code(out, acc, used, at, _ones_before_big(levels, after, n), k_run)
    return rice.flush(out, acc, used, at)


# What _decode_levels returns when a stream does not describe the frame's values.
_PAST_END, _GAP_OVERRUNS, _LEVEL_ABOVE, _RUN_OVERRUNS = range(-4, 0)


@kernel
def _decode_levels(words: np.ndarray, end: int, nonzero: int, top: int, k_gap: int, k_run: int, k_level: int,
                   steps: np.ndarray, bucket: int, out: np.ndarray) -> int:
    """Scatter the non-zero values of qsgdz's stream (``end`` bits in ``words``, padded as
    rice.py's reader reads them; see QSGDZ) into ``out`` (zeros): each level * steps[its
    bucket], negated where its sign bit is set. (Writing the zeros between them here, 16 or 32
    to a store, took longer than numpy's zeroing of the whole vector first.) Returns the bits read, or one of the
    errors above. Every code is bounded by what is left (positions in ``out``, non-zero levels,
    levels up to ``top``): a forged stream ends the loop at once."""
    bits, held, at = rice.start(words, 0)
    run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero)
    if run < 0:
        return _PAST_END if run == rice.PAST_END else _RUN_OVERRUNS
    position, last, c, bucket_end = 0, out.size - 1, 0, bucket  # position: after the last value written
    for j in range(nonzero):
        gap, negative, bits, held, at = rice.get_code_and_bit(words, bits, held, at, end, k_gap, last - position,
                                                              True)
        if gap < 0:
            return _PAST_END if gap == rice.PAST_END else _GAP_OVERRUNS
        position += gap
        level = 1
        if run:
            run -= 1
        else:
            level, bits, held, at = rice.get_code(words, bits, held, at, end, k_level, top - 2)
            if level < 0:
                return _PAST_END if level == rice.PAST_END else _LEVEL_ABOVE
            level += 2
            run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero - 1 - j)
            if run < 0:
                return _PAST_END if run == rice.PAST_END else _RUN_OVERRUNS
        while position >= bucket_end:  # buckets passed since the last value: no division a value
            c, bucket_end = c + 1, bucket_end + bucket
        value = np.float32(level) * steps[c]
        out[position] = -value if negative else value
        position += 1
    return at if at <= end else _PAST_END


_DECODE_ERRORS = {_PAST_END: "level stream ends before its {nonzero} non-zero levels",
                  _GAP_OVERRUNS: "a run of zero levels overruns the {numel} values",
                  _LEVEL_ABOVE: "a level above the {levels} levels in the header",
                  _RUN_OVERRUNS: "a run of levels 1 overruns the {nonzero} non-zero levels"}


@kernel
def _code_values(levels: np.ndarray, negative: np.ndarray, n: int, k: int, out: np.ndarray) -> int:
    """qsgdz's VALUES stream (see QSGDZ) of the first ``n`` byte levels and the sign bitmap
    ``negative`` (bytes) into the words ``out``; returns its bits. A level 0 is its code without
    a sign bit, in the same ``put`` as the others (no branch a value)."""
    acc, used, at = np.uint64(0), 0, 0
    for i in range(n):
        level = np.int64(levels[i])
        sign = np.int64((negative[np.uint64(i) >> np.uint64(3)] >> np.uint64(i & 7)) & 1)
        acc, used, at = rice.put_code_and_bit(out, acc, used, at, level, k, sign, np.int64(level != 0))
    return rice.flush(out, acc, used, at)


@kernel
def _histogram(levels: np.ndarray, n: int) -> np.ndarray:
    """The counts of each byte level among the first ``n``, in four tables (to be added up): a
    run of one level does not wait, value after value, on one counter's store."""
    counts = np.zeros((4, 256), np.int64)
    for i in range(0, n - n % 4, 4):
        for j in range(4):
            counts[j, levels[i + j]] += 1
    for i in range(n - n % 4, n):
        counts[0, levels[i]] += 1
    return counts


@kernel
def _decode_values(words: np.ndarray, end: int, top: int, k: int, steps: np.ndarray, bucket: int,
                   out: np.ndarray) -> tuple[int, int]:
    """Write the values of qsgdz's VALUES stream (``end`` bits in ``words``, padded as rice.py's
    reader reads them; see QSGDZ) to ``out``, every one: level * steps[its bucket], negated where
    its sign bit is set. Returns (the bits read, or _PAST_END or _LEVEL_ABOVE, the non-zero
    levels read); each code is bounded by ``top`` before its quotient is shifted."""
    bits, held, at = rice.start(words, 0)
    nonzero = 0
    for c in range(steps.size):
        step = steps[c]
        for i in range(c * bucket, min(c * bucket + bucket, out.size)):
            level, negative, bits, held, at = rice.get_code_and_bit(words, bits, held, at, end, k, top, False)
            if level < 0:
                return (_PAST_END if level == rice.PAST_END else _LEVEL_ABOVE), nonzero
            nonzero += level != 0
            value = np.float32(level) * step
            out[i] = -value if negative else value
    return (at if at <= end else _PAST_END), nonzero


_VALUES_ERRORS = {_PAST_END: "level stream ends before its {numel} values", _LEVEL_ABOVE: _DECODE_ERRORS[_LEVEL_ABOVE]}


# The layouts of a qsgdz frame (its parameters say which).
RICE, DENSE, VALUES = 0, 1, 2
_LAYOUTS = f"{RICE} (Rice runs), {DENSE} (dense) or {VALUES} (Rice values)"
MAX_VALUE_PARAMETER = 7  # levels are bytes: a larger k only adds zero bits to every code


@register
class QSGDZ(QSGD):
    """qsgd<s>'s quantizer with entropy-coded frames. Parameters: levels s, bucket, the layout
    (RICE, DENSE or VALUES), the count of non-zero levels and three Rice parameters (rice.py),
    k_gap, k_run and k_level: all four 0 in a DENSE frame, k_gap and k_run 0 in a VALUES frame,
    whose k_level (0..MAX_VALUE_PARAMETER) codes every level.

    RICE payload: the float32 bucket norms, then one bit stream (rice.py's layout) to the
    payload's end, zero padding bits in its last byte. The stream: the Rice code (k_run) of the
    count of levels 1 before the first level above 1; then per non-zero level, in order, the Rice
    code (k_gap) of the zero levels before it (since the previous non-zero one), its sign bit (1:
    negative) and, when the count of levels 1 still to come before one above 1 is spent, the Rice
    code (k_level) of its level - 2 and of the count of levels 1 before the next level above 1 (or
    the end). The zero levels after the last non-zero one are implied by numel. At 3 levels most
    levels are 0 and most others 1: a non-zero level costs its run of zeros (k_gap + 1 bits or
    so), its sign and about nothing for its level.

    DENSE payload: qsgd<s>'s, byte for byte (norms, sign bitmap, levels bit-packed in
    ceil(log2(s+1)) bits). Where most levels are non-zero and near s (few values a bucket), the
    codes of runs and levels cost more than a fixed width. The signs stay a bitmap rather than a
    bit per non-zero level: DENSE wins only where most levels are non-zero anyway, and the bitmap
    is what qsgd<s> sends.

    VALUES payload: the bucket norms, then a stream as RICE's of, per value in order, the Rice
    code (k_level) of its level and, for a non-zero level, its sign bit. At many levels (255)
    most levels are non-zero and spread over a range: a code per value near their mean beats
    runs of zeros between them and levels coded apart.

    The encoder sends the smallest payload (DENSE on a tie, then VALUES), so no frame is larger
    than a DENSE one and ``wire_size`` (inherited) is qsgd<s>'s payload size."""
    name = "qsgdz"
    codec_id = 12
    sized_by_content = True
    # levels, bucket, layout, non-zero levels, k_gap, k_run, k_level
    params_struct = struct.Struct("<BIBIBBB")

    def __init__(self, levels: int = 16, bucket: int = 512, seed: int | np.random.Generator | None = None, **kw) -> None:
        super().__init__(levels, bucket, seed, **kw)
        self.name = f"qsgdz{levels}"

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        norms, q, negative = self._quantize(vec)
        n, head = vec.size, (self.levels, self.bucket)
        codes = LevelCodes(q, negative, n, self.levels)
        dense = _dense_size(n, self.levels, self.bucket) - norms.nbytes
        values = -(-codes.value_bits // 8)
        # Exact, not estimates: DENSE's size is fixed and VALUES' known from the counts (see
        # LevelCodes), so neither is coded to be compared. RICE's is known only once coded, and
        # is coded only where its fewest bits under the counts are below the better of the
        # other two: at 255 levels RICE cannot win, and its pass is skipped.
        layout, size = (VALUES, values) if values < dense else (DENSE, dense)
        if -(-codes.rice_least_bits() // 8) < size:
            params, stream = codes.rice()
            if stream.size < size:
                return (*head, RICE, *params), [norms, stream]
        if layout == VALUES:
            params, stream = codes.values()
            return (*head, VALUES, *params), [norms, stream]
        return (*head, DENSE, 0, 0, 0, 0), _dense_parts(norms, q, negative, self.levels, n)

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        name = type(self).name
        levels, bucket = _check_params(name, params[:2])
        layout, nonzero, *parameters = params[2:]
        if layout == DENSE:
            if nonzero or any(parameters):
                raise CodecError(f"{name}: dense frame with Rice parameters {nonzero, *parameters}, not zeros")
            return _decode_dense(name, numel, levels, bucket, payload)
        if layout not in (RICE, VALUES):
            raise CodecError(f"{name}: layout {layout}, not {_LAYOUTS}")
        return _decode_stream(name, numel, levels, bucket, layout, nonzero, parameters, payload)


class LevelCodes:
    """The Rice layouts of the quantizer's output (QSGD._quantize): their parameters and sizes
    from a counting pass over the levels (and their histogram where VALUES' best k may be above
    0), and either stream on demand."""

    def __init__(self, q: np.ndarray, negative: np.ndarray, numel: int, levels: int) -> None:
        self.q, self.negative, self.numel, self.levels = q, negative, numel, levels
        self.nonzero, self.big, self.total = _level_counts(q)
        self.k_value, self.value_bits = self._value_codes()

    def _value_codes(self) -> tuple[int, int]:
        """(k, bits) of the VALUES stream at its best k, exactly: a value's code takes
        (level >> k) + 1 + k bits and a non-zero level's sign one more, so the stream's length
        is a sum over the levels' histogram. Where the levels sum to at most numel, k = 0 is
        best (k >= 1 saves sum(level - (level >> k)) <= that sum bits and costs k * numel) and
        its length, numel + the sum + the signs, needs no histogram: frames of few levels
        (qsgdz3) skip that pass."""
        total = self.nonzero - self.big + self.total
        if total <= self.numel:
            return 0, self.numel + total + self.nonzero
        counts = _histogram(self.q, self.numel).sum(axis=0)
        level = np.arange(counts.size)
        bits = [int(counts @ ((level >> k) + 1 + k)) for k in range(MAX_VALUE_PARAMETER + 1)]
        k = int(np.argmin(bits))
        return k, bits[k] + self.nonzero

    def _rice_parameters(self) -> tuple[int, int, int]:
        """(k_gap, k_run, k_level) of the RICE stream: each floor(log2) of its codes' mean."""
        nonzero, big = self.nonzero, self.big
        return (rice.parameter(self.numel - nonzero, nonzero), rice.parameter(nonzero - big, big + 1),
                rice.parameter(self.total - 2 * big, big))

    def rice_least_bits(self) -> int:
        """The fewest bits the RICE stream can take: rice.least_bits of each kind of code, whose
        sums are the counts' (runs of levels 1, levels - 2), or at least 0 (runs of zeros)."""
        nonzero, big = self.nonzero, self.big
        k_gap, k_run, k_level = self._rice_parameters()
        return (rice.least_bits(0, nonzero, k_gap) + nonzero + rice.least_bits(nonzero - big, big + 1, k_run)
                + rice.least_bits(self.total - 2 * big, big, k_level))

    def rice(self) -> tuple[tuple, np.ndarray]:
        """((non-zero levels, k_gap, k_run, k_level), the stream's bytes in a scratch array) of
        a RICE frame."""
        parameters = self._rice_parameters()
        out = scratch.buffer("qsgdz.stream", -(-_stream_bits_bound(self.numel, self.levels) // 64) + 1, np.uint64)
        end = _code_levels(self.q, self.negative, self.numel, *parameters, out)
        return (self.nonzero, *parameters), out.view(np.uint8)[: -(-end // 8)]

    def values(self) -> tuple[tuple, np.ndarray]:
        """((non-zero levels, 0, 0, k), the stream's bytes in a scratch array) of a VALUES
        frame (the same array as ``rice``'s)."""
        out = scratch.buffer("qsgdz.stream", self.value_bits // 64 + 1, np.uint64)
        end = _code_values(self.q, self.negative, self.numel, self.k_value, out)
        return (self.nonzero, 0, 0, self.k_value), out.view(np.uint8)[: -(-end // 8)]


def _decode_stream(name: str, numel: int, levels: int, bucket: int, layout: int, nonzero: int, parameters: list,
                   payload: memoryview) -> np.ndarray:
    """The vector of a RICE or VALUES payload, validated."""
    norm_len = 4 * chunks.count(numel, bucket)
    if len(payload) < norm_len:
        raise CodecError(f"{name}: payload {len(payload)} bytes, shorter than {numel} values' "
                         f"{norm_len} bytes of bucket norms")
    if nonzero > numel:
        raise CodecError(f"{name}: {nonzero} non-zero levels for only {numel} values")
    _check_rice_parameters(name, layout, parameters)
    norms = _norms(name, payload, norm_len)
    stream = np.frombuffer(payload, np.uint8, offset=norm_len)
    words, bits, steps = _padded_words(stream), 8 * stream.size, _steps(norms, levels)
    if layout == RICE:
        out = np.zeros(numel, np.float32)
        end, errors = _decode_levels(words, bits, nonzero, levels, *parameters, steps, bucket, out), _DECODE_ERRORS
    else:
        out = np.empty(numel, np.float32)  # every value is written
        end, found = _decode_values(words, bits, levels, parameters[2], steps, bucket, out)
        errors = _VALUES_ERRORS
        if end >= 0 and found != nonzero:
            raise CodecError(f"{name}: level stream has {found} non-zero levels, the header {nonzero}")
    if end < 0:
        raise CodecError(f"{name}: " + errors[end].format(nonzero=nonzero, numel=numel, levels=levels))
    if stream.size != -(-end // 8):
        raise CodecError(f"{name}: level stream of {stream.size} bytes, its codes end in byte {-(-end // 8)}")
    if end % 8 and stream[-1] >> (end % 8):
        raise CodecError(f"{name}: level stream has non-zero padding bits")
    return out


def _check_rice_parameters(name: str, layout: int, parameters: list) -> None:
    if layout == VALUES:
        if parameters[0] or parameters[1]:
            raise CodecError(f"{name}: per-value frame with k_gap, k_run {tuple(parameters[:2])}, not zeros")
        if parameters[2] > MAX_VALUE_PARAMETER:
            raise CodecError(f"{name}: per-value Rice parameter {parameters[2]} above {MAX_VALUE_PARAMETER}")
    elif max(parameters) > rice.MAX_PARAMETER:
        raise CodecError(f"{name}: Rice parameters {parameters} above {rice.MAX_PARAMETER}")


def _stream_bits_bound(numel: int, levels: int) -> int:
    """The most bits a RICE stream of ``numel`` levels up to ``levels`` takes (the size of the
    coder's buffer), from rice.parameter's bound count * (k + 3) with the encoder's parameters,
    for N non-zero levels, M of them above 1: the runs of zeros and the signs at most 2 numel
    (k_gap = 0: the codes take numel - N zeros and N ones; k_gap >= 1: N <= numel / 3), the counts
    of levels 1 at most 2 N + 1, the levels fewer than M (bit_length(levels - 2) + 2)."""
    return 1 + numel * (4 + (max(levels - 2, 1)).bit_length() + 2)


def _padded_words(stream: np.ndarray) -> np.ndarray:
    """The stream's bytes as little-endian 64-bit words in a scratch array, zero past its end:
    four words past its last whole one, as far as rice.py's reader reads."""
    whole = stream.size // 8
    words = scratch.buffer("qsgdz.words", whole + 4, np.uint64)
    words[whole:] = 0
    words.view(np.uint8)[: stream.size] = stream
    return words
