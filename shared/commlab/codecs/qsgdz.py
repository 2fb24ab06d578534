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

from commlab.codecs import huffman, lanes, rice, scratch
from commlab.codecs.base import register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.bitmaps import WORD
from commlab.codecs.qsgd import QSGD, check_params, decode_dense, dense_parts, dense_size
from commlab.codecs.qsgdz_masks import code_masks, code_signs, decode_masks, mask_words, ones_before_big
from commlab.codecs.qsgdz_read import DENSE, MASKS, MAX_VALUE_PARAMETER, RICE, VALUES, decode_stream


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
    acc, used, at = rice.put_code(out, np.uint64(0), 0, 0, ones_before_big(levels, 0, n), k_run)
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
            acc, used, at = rice.put_code(out, acc, used, at, ones_before_big(levels, after, n), k_run)
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
    """The counts of each byte value among the first ``n`` (levels, or MASKS' bitmap bytes), in
    four tables (to be added up): a run of one value does not wait, byte after byte, on one
    counter's store."""
    counts = np.zeros((4, 256), np.int64)
    for i in range(0, n - n % 4, 4):
        for j in range(4):
            counts[j, levels[i + j]] += 1
    for i in range(n - n % 4, n):
        counts[0, levels[i]] += 1
    return counts


# RICE is coded beside MASKS only where the model of its runs puts it this share below: on
# normal values in buckets of 512 at 3 levels RICE is a little smaller, not worth its time.
RICE_MARGIN = 0.03


@register
class QSGDZ(QSGD):
    """qsgd<s>'s quantizer with entropy-coded frames. Parameters: levels s, bucket, the layout
    (RICE, DENSE, VALUES or MASKS), the count of non-zero levels and three Rice parameters (rice.py),
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

    MASKS payload (k_gap 0): the bucket norms; the code lengths of a canonical Huffman code of
    bytes (huffman.py: 128 bytes, a nibble each); the sign bits of the non-zero levels in order
    (1: negative), ceil(nonzero / 8) bytes, zero padding bits; then one bit stream as RICE's: the
    codes of the ceil(numel / 8) bytes of the non-zero bitmap (bit j of byte b: value 8 b + j),
    then the levels above 1 as RICE codes them (the count of levels 1 before the first, then per
    level above 1 its level - 2 and the count of levels 1 before the next). Its size is about
    RICE's where non-zero levels are a few in a hundred or more (both near the bitmap's
    entropy), and it codes and decodes in passes of fixed steps: a code a byte, the values of 64
    positions from their bitmap word and sign bits, where RICE's reader follows a chain of codes
    of varying length, one per non-zero level. Where they are fewer, a byte's code takes at
    least a bit and RICE's runs are smaller.

    DENSE payload: qsgd<s>'s, byte for byte (norms, sign bitmap, levels bit-packed in
    ceil(log2(s+1)) bits). Where most levels are non-zero and near s (few values a bucket), the
    codes of runs and levels cost more than a fixed width. The signs stay a bitmap rather than a
    bit per non-zero level: DENSE wins only where most levels are non-zero anyway, and the bitmap
    is what qsgd<s> sends.

    VALUES payload: the bucket norms, then a stream as RICE's of, per value in order, the Rice
    code (k_level) of its level and, for a non-zero level, its sign bit. At many levels (255)
    most levels are non-zero and spread over a range: a code per value near their mean beats
    runs of zeros between them and levels coded apart.

    The encoder sends the smallest payload of those it codes (on a tie DENSE, then VALUES, then
    MASKS), so no frame is larger than a DENSE one and ``wire_size`` (inherited) is qsgd<s>'s
    payload size. DENSE's and VALUES' sizes are known from counts, MASKS' once its bytes are
    counted; RICE is coded only where its fewest bits are below the best of those and a
    geometric model of the runs of zeros (LevelCodes.rice_expected_gap_bits) puts its stream below
    MASKS' by more than RICE_MARGIN: within it the two are about the same size, and MASKS takes
    less time."""
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
        # LevelCodes), so neither is coded to be compared. MASKS is coded where a bit per bitmap
        # byte would be smaller than the better of them (few levels: most levels 0); RICE where its
        # fewest bits are below the best so far and, when MASKS is coded, where the model of
        # its runs puts it ahead (see QSGDZ). At 255 levels neither is coded.
        layout, size = (VALUES, values) if values < dense else (DENSE, dense)
        masks, mask_bits = None, 0
        if codes.masks_least_bytes() < size:
            params, parts, mask_bits = codes.masks()
            masks_size = sum(part.size for part in parts)
            if masks_size < size:
                layout, size, masks = MASKS, masks_size, (params, parts)
        if -(-codes.rice_least_bits() // 8) < size and (
                masks is None or codes.rice_expected_gap_bits() < (1 - RICE_MARGIN) * mask_bits):
            params, stream = codes.rice()
            if stream.size < size:
                return (*head, RICE, *params), [norms, stream]
        if layout == MASKS:
            return (*head, MASKS, *masks[0]), [norms, *masks[1]]
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
        if layout == MASKS:
            return decode_masks(name, numel, levels, bucket, nonzero, parameters, payload)
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

    def rice_expected_gap_bits(self) -> float:
        """The bits of RICE's codes of the runs of zeros were the runs geometric, of their mean m:
        each takes k_gap + 1 bits and its quotient, whose mean is r / (1 - r) for r the chance
        that a run is 2**k_gap or longer, (m / (m + 1)) ** 2**k_gap."""
        if not self.nonzero:
            return 0.0
        k, mean = self._rice_parameters()[0], (self.numel - self.nonzero) / self.nonzero
        r = (mean / (mean + 1)) ** (1 << k)
        return self.nonzero * (k + 1 + r / (1 - r))

    def masks_least_bytes(self) -> int:
        """The fewest bytes of a MASKS payload after the norms: its code lengths, the sign bits,
        a bit at least per bitmap byte and the fewest bits of the levels above 1 (as RICE's)."""
        nonzero, big = self.nonzero, self.big
        _, k_run, k_level = self._rice_parameters()
        stream = (-(-self.numel // 8) + rice.least_bits(nonzero - big, big + 1, k_run)
                  + rice.least_bits(self.total - 2 * big, big, k_level))
        return huffman.TABLE_BYTES + -(-nonzero // 8) + -(-stream // 8)

    def masks(self) -> tuple[tuple, list, int]:
        """((non-zero levels, 0, k_run, k_level), the payload's parts after the norms (code
        lengths, sign bits, stream) in scratch arrays of their own, the bits of the stream's
        bitmap codes with the code lengths' table) of a MASKS frame."""
        n, nbytes = self.numel, -(-self.numel // 8)
        words = scratch.buffer("qsgdz.mask_words", -(-n // WORD), np.uint64)
        mask_words(self.q, words)
        counts = _histogram(words.view(np.uint8), nbytes).sum(axis=0)
        lengths = huffman.code_lengths(counts)
        code_bits = int(counts @ lengths)
        _, k_run, k_level = self._rice_parameters()
        out = scratch.buffer("qsgdz.masks_stream", (code_bits + _stream_bits_bound(n, self.levels)) // 64 + 2,
                             np.uint64)
        end = code_masks(words.view(np.uint8), nbytes, huffman.codes(lengths), lengths, self.q, n, k_run, k_level,
                          out)
        signs = scratch.buffer("qsgdz.signs", self.nonzero // 64 + 2, np.uint64)
        sign_bits = code_signs(self.negative, words, signs)
        parts = [huffman.pack_lengths(lengths), signs.view(np.uint8)[: -(-sign_bits // 8)],
                 out.view(np.uint8)[: -(-end // 8)]]
        return (self.nonzero, 0, k_run, k_level), parts, code_bits + 8 * huffman.TABLE_BYTES

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

