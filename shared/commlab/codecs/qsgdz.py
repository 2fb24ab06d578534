"""qsgdz<s>: qsgd<s>'s quantizer (qsgd.py: the same draws, the same decoded vector) with
entropy-coded frames, as the QSGD paper codes its levels (Elias codes there). At few levels most
levels are 0 and most others 1, so a frame sends Rice codes (rice.py) of the runs of zero levels, a
sign per non-zero level and the levels above 1 only; at many levels most are non-zero, and a Rice
code of each value's level is smaller; where most levels are non-zero and near s, qsgd<s>'s payload
is. It sends the smallest of the three (layouts: QSGDZ); the size depends on the data, so
`wire_size` is only a bound, that of qsgd<s>'s payload."""
from __future__ import annotations

import struct

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from commlab.codecs import lanes, rice, scratch
from commlab.codecs.base import register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.bitmaps import WORD
from commlab.codecs.qsgd import QSGD, check_params, decode_dense, dense_parts, dense_size
from commlab.codecs.qsgdz_read import DENSE, MAX_VALUE_PARAMETER, RICE, VALUES, decode_stream


@kernel
def _level_counts(levels: np.ndarray) -> tuple[int, int, int]:
    """(levels above 0, levels above 1, sum of the levels above 1) of byte levels (zero-padded
    to a multiple of 64), what picks a frame's Rice parameters: 64 at a time, counting the
    bits of two compares, and the sum only in the blocks that have levels above 1."""
    nonzero, big, total = 0, 0, 0
    for first in range(0, levels.size, WORD):
        nonzero += lanes.popcount(~lanes.equal_64(levels, first, 0))
        above = lanes.popcount(~lanes.below_64(levels, first, 2))
        if above:
            big += above
            for i in range(first, first + WORD):
                total += np.int64(levels[i]) if levels[i] > 1 else 0
    return nonzero, big, total


@kernel(inline="always")
def _ones_before_big(levels: np.ndarray, start: int, n: int) -> int:
    """The levels equal to 1 from ``start`` up to the next level above 1 (or to ``n``), 64 at a
    time (``levels`` zero past n up to a multiple of 64)."""
    count, block, low = 0, start // WORD, np.uint64(start % WORD)
    while WORD * block < n:
        first = WORD * block
        nonzero = ~lanes.equal_64(levels, first, 0) >> low << low
        big = ~lanes.below_64(levels, first, 2) >> low << low
        if big:
            return count + lanes.popcount(nonzero & ((big & (~big + np.uint64(1))) - np.uint64(1)))
        count += lanes.popcount(nonzero)
        block, low = block + 1, np.uint64(0)
    return count


@kernel(inline="always")
def _put_gaps(out: np.ndarray, acc: np.uint64, used: int, at: int, after: int, first: int, nonzero: np.uint64,
              signs: np.uint64, k_gap: int) -> tuple[np.uint64, int, int, int]:
    """Append, per set bit j of ``nonzero`` (value first + j, a non-zero level), the Rice code
    (k_gap) of the zero levels since position ``after`` and its sign bit (bit j of the block's
    sign word ``signs``); returns the writer's state and the position after the last."""
    while nonzero:
        j = np.uint64(trailing_zeros(nonzero))
        nonzero &= nonzero - np.uint64(1)
        i = first + np.int64(j)
        acc, used, at = rice.put_code_and_bit(out, acc, used, at, i - after, k_gap, np.int64((signs >> j) & np.uint64(1)), 1)
        after = i + 1
    return acc, used, at, after


@kernel
def _code_levels(levels: np.ndarray, negative: np.ndarray, n: int, k_gap: int, k_run: int, k_level: int,
                 out: np.ndarray) -> int:
    """qsgdz's stream (see QSGDZ) of the first ``n`` byte levels (zero past n up to a multiple of
    64) and the sign bitmap's words ``negative`` into the words ``out``; returns its bits. The
    non-zero levels are found 64 at a time (one compare of 64 bytes, then their set bits); a block
    is cut only at its levels above 1 (few at few levels), which carry two more codes."""
    acc, used, at = rice.put_code(out, np.uint64(0), 0, 0, _ones_before_big(levels, 0, n), k_run)
    after = 0  # the position after the last non-zero level
    for block in range(-(-n // WORD)):
        first = WORD * block
        nonzero, signs = ~lanes.equal_64(levels, first, 0), negative[block]
        big = ~lanes.below_64(levels, first, 2)
        while big:
            lowest = big & (~big + np.uint64(1))
            big ^= lowest
            upto = nonzero & ((lowest << np.uint64(1)) - np.uint64(1))  # all of them when lowest is bit 63
            nonzero ^= upto
            acc, used, at, after = _put_gaps(out, acc, used, at, after, first, upto, signs, k_gap)
            acc, used, at = rice.put_code(out, acc, used, at, np.int64(levels[after - 1]) - 2, k_level)
            acc, used, at = rice.put_code(out, acc, used, at, _ones_before_big(levels, after, n), k_run)
        acc, used, at, after = _put_gaps(out, acc, used, at, after, first, nonzero, signs, k_gap)
    return rice.flush(out, acc, used, at)


@kernel
def _code_values(levels: np.ndarray, negative: np.ndarray, n: int, k: int, out: np.ndarray) -> int:
    """qsgdz's VALUES stream (see QSGDZ) of the first ``n`` byte levels and the sign bitmap's
    words ``negative`` into the words ``out``; returns its bits. A level 0 is its code without
    a sign bit, in the same ``put`` as the others (no branch a value)."""
    acc, used, at = np.uint64(0), 0, 0
    for i in range(n):
        level = np.int64(levels[i])
        sign = np.int64((negative[np.uint64(i) >> np.uint64(6)] >> np.uint64(i & 63)) & np.uint64(1))
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
        dense = dense_size(n, self.levels, self.bucket) - norms.nbytes
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
        return (*head, DENSE, 0, 0, 0, 0), dense_parts(norms, q, negative, self.levels, n)

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        name = type(self).name
        levels, bucket = check_params(name, params[:2])
        layout, nonzero, *parameters = params[2:]
        if layout == DENSE:
            if nonzero or any(parameters):
                raise CodecError(f"{name}: dense frame with Rice parameters {nonzero, *parameters}, not zeros")
            return decode_dense(name, numel, levels, bucket, payload)
        return decode_stream(name, numel, levels, bucket, layout, nonzero, parameters, payload)


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


def _stream_bits_bound(numel: int, levels: int) -> int:
    """The most bits a RICE stream of ``numel`` levels up to ``levels`` takes (the size of the
    coder's buffer), from rice.parameter's bound count * (k + 3) with the encoder's parameters,
    for N non-zero levels, M of them above 1: the runs of zeros and the signs at most 2 numel
    (k_gap = 0: the codes take numel - N zeros and N ones; k_gap >= 1: N <= numel / 3), the counts
    of levels 1 at most 2 N + 1, the levels fewer than M (bit_length(levels - 2) + 2)."""
    return 1 + numel * (4 + (max(levels - 2, 1)).bit_length() + 2)

