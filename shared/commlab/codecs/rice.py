"""Rice codes in a bit stream, for qsgdz's entropy-coded levels: the writer and the reader as
compiled inline steps (jit.py) that a coding loop threads its state through.

The stream is a little-endian sequence of 64-bit words, bit j of the stream being bit j % 64 of
word j // 64 (so its bytes are the words' bytes, the first bit the low bit of byte 0). The Rice
code of a value v >= 0 with parameter k (0..31) is q = v >> k zero bits, a one bit, then the k low
bits of v, low bit first: k + 1 + (v >> k) bits, short for values near 2**k. A reader finds q as
the trailing zeros of the next 64 bits, so a value costs a few instructions and no table.

``parameter`` picks k from a sum and a count (floor(log2) of the mean): the code of count values
summing to at most that sum then takes fewer than count * (k + 3) bits, the bound qsgdz's coder
sizes its buffer by (see ``parameter``); ``least_bits`` is the other side, the fewest bits such
codes take. A code may carry one more bit after it (qsgdz's signs), in the same ``put``.
"""
from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from commlab.codecs import scratch
from commlab.codecs.jit import kernel

MAX_PARAMETER = 31  # values up to 2**31 (positions in a vector of at most wire.MAX_NUMEL)
_CHUNK = 31  # zero bits put at a time of a long quotient: a shorter one, 1 + k <= 32 bits and a bit fit one put of 63
PAST_END, OVER_LIMIT = -2, -1  # what ``get`` returns instead of a value
_ZERO, _ONE, _BITS = np.uint64(0), np.uint64(1), np.uint64(63)


def parameter(total: int, count: int) -> int:
    """k for ``count`` values summing to at most ``total``: floor(log2(total // count)), 0 when
    the mean is below 2 or nothing is coded. Then 2**(k + 1) > mean, so the values' quotients add
    up to at most total >> k < 2 * count and the codes to fewer than count * (k + 3) bits."""
    return max((total // count).bit_length() - 1, 0) if count else 0


def least_bits(total: int, count: int, k: int) -> int:
    """The fewest bits the codes of ``count`` values summing to ``total`` take with parameter
    ``k``: each takes k + 1 + (v >> k), and v >> k >= (v - 2**k + 1) / 2**k."""
    return count * (k + 1) + max(-(-(total - count * ((1 << k) - 1)) >> k), 0)


# The writer's state: (acc, used, at): the ``used`` bits (0..63) not yet stored, low in ``acc``
# (uint64), and the index of the word they go to.

@kernel(inline="always")
def put(out: np.ndarray, acc: np.uint64, used: int, at: int, value: np.uint64, nbits: int
        ) -> tuple[np.uint64, int, int]:
    """Append the ``nbits`` (0..63) low bits of ``value`` (no others set). Without a branch: the
    word is stored every time, and moves on when full (a branch taken once in a few codes, at
    random, cost more than the codes)."""
    acc |= value << np.uint64(used)
    out[at] = acc
    total = used + nbits
    full = total >> 6
    used = total & 63
    spill = value >> np.uint64((nbits - used) & 63)  # the bits that did not fit, when full
    return (spill if full else acc), used, at + full


@kernel(inline="always")
def put_code(out: np.ndarray, acc: np.uint64, used: int, at: int, value: int, k: int
             ) -> tuple[np.uint64, int, int]:
    """Append the Rice code of ``value`` (>= 0) with parameter ``k`` (0..MAX_PARAMETER)."""
    v, shift = np.uint64(value), np.uint64(k)
    q = v >> shift
    while q >= np.uint64(_CHUNK):
        acc, used, at = put(out, acc, used, at, _ZERO, _CHUNK)
        q -= np.uint64(_CHUNK)
    code = (((v & ((_ONE << shift) - _ONE)) << _ONE) | _ONE) << q
    return put(out, acc, used, at, code, np.int64(q) + 1 + k)


@kernel(inline="always")
def put_code_and_bit(out: np.ndarray, acc: np.uint64, used: int, at: int, value: int, k: int, bit: int,
                     has_bit: int) -> tuple[np.uint64, int, int]:
    """Append the Rice code of ``value`` with parameter ``k``, then ``bit`` if ``has_bit`` (0 or
    1: a code with or without its bit, chosen without a branch): one ``put`` for both unless the
    quotient is _CHUNK or more."""
    v, shift = np.uint64(value), np.uint64(k)
    q = v >> shift
    if q >= np.uint64(_CHUNK):
        acc, used, at = put_code(out, acc, used, at, value, k)
        return put(out, acc, used, at, np.uint64(bit & has_bit), has_bit)
    code = ((((v & ((_ONE << shift) - _ONE)) | (np.uint64(bit & has_bit) << shift)) << _ONE) | _ONE) << q
    return put(out, acc, used, at, code, np.int64(q) + 1 + has_bit + k)


@kernel(inline="always")
def flush(out: np.ndarray, acc: np.uint64, used: int, at: int) -> int:
    """Store the last, partial word (``put`` stores a word before its bits, not those it spills
    into the next); returns the stream's length in bits."""
    out[at] = acc
    return 64 * at + used


@kernel(inline="always")
def window(words: np.ndarray, at: int) -> np.uint64:
    """Stream bits at..at + 63 as one word (bit 0: bit ``at``); reads words at // 64 and the next."""
    w, offset = at >> 6, np.uint64(at & 63)
    return (words[w] >> offset) | ((words[w + 1] << _ONE) << (_BITS - offset))


@kernel(inline="always")
def get(words: np.ndarray, at: int, end: int, k: int, limit: int) -> tuple[int, int]:
    """(value, position after it) of the Rice code at bit ``at`` with parameter ``k``; value
    PAST_END where the code starts past bit ``end`` (the stream's length) or its zero bits run
    past it, OVER_LIMIT where it exceeds ``limit`` (checked before the quotient is shifted, so
    a forged run of zeros cannot overflow). Returns a position of at most end + 95."""
    if at > end:
        return PAST_END, at
    bits = window(words, at)
    q = 0
    while bits == _ZERO:  # a quotient of 64 or more: whole words of zeros
        q += 64
        at += 64
        if at > end:
            return PAST_END, at
        if q > limit >> k:
            return OVER_LIMIT, at
        bits = window(words, at)
    zeros = np.int64(trailing_zeros(bits))
    q += zeros
    if q > limit >> k:
        return OVER_LIMIT, at
    at += zeros + 1
    mask = (_ONE << np.uint64(k)) - _ONE
    if zeros + 1 + k <= 63:
        low = (bits >> np.uint64(zeros + 1)) & mask
    else:
        low = window(words, at) & mask
    value = (q << k) | np.int64(low)
    if value > limit:
        return OVER_LIMIT, at
    return value, at + k


# The reader's state: (bits, held, at): the stream's bits at..at + held - 1 in the low bits of
# ``bits`` (held >= 32). A code is taken from the register and the register shifted: the next
# code depends on the last one through a shift, not through a load from its position (which
# took twice as long). ``words`` holds end // 64 + 4 words, zero past the stream (``end`` bits):
# no read goes further, and a code read from the register has its one bit before ``end`` (past
# it the register holds zeros, and ``get`` takes over), so no check of ``at`` is needed there.

@kernel(inline="always")
def start(words: np.ndarray, at: int) -> tuple[np.uint64, int, int]:
    """The reader's state at bit ``at``."""
    return window(words, at), 64, at


@kernel(inline="always")
def _skip(words: np.ndarray, bits: np.uint64, held: int, at: int, n: int) -> tuple[np.uint64, int, int]:
    """The state ``n`` (< held) bits on, the register filled again when fewer than 32 are left."""
    at += n
    if held - n < 32:
        return window(words, at), 64, at
    return bits >> np.uint64(n), held - n, at


@kernel(inline="always")
def get_code(words: np.ndarray, bits: np.uint64, held: int, at: int, end: int, k: int, limit: int
             ) -> tuple[int, np.uint64, int, int]:
    """(value, state after it) of the Rice code at the state's position: ``get``'s values and
    checks, from the register where the code lies in it."""
    zeros = np.int64(trailing_zeros(bits))  # 64 for no set bit
    n = zeros + 1 + k
    if n >= held:  # a long quotient, or not all of the code in the register
        value, at = get(words, at, end, k, limit)
        return value, window(words, at), 64, at
    value = (zeros << k) | np.int64((bits >> np.uint64(zeros + 1)) & ((_ONE << np.uint64(k)) - _ONE))
    if value > limit:
        return OVER_LIMIT, bits, held, at
    bits, held, at = _skip(words, bits, held, at, n)
    return value, bits, held, at


@kernel(inline="always")
def get_code_and_bit(words: np.ndarray, bits: np.uint64, held: int, at: int, end: int, k: int, limit: int,
                     zero_has_bit: bool) -> tuple[int, int, np.uint64, int, int]:
    """(value, bit, state after them) of a Rice code and the bit after it, as ``get_code``; a code
    of 0 has no bit after it (bit 0) unless ``zero_has_bit``."""
    zeros = np.int64(trailing_zeros(bits))
    if zeros + 2 + k >= held:
        value, at = get(words, at, end, k, limit)
        if value < 0:
            return value, 0, window(words, at), 64, at
        has_bit = np.int64(zero_has_bit or value != 0)
        bit = np.int64((words[at >> 6] >> np.uint64(at & 63)) & _ONE) & has_bit
        return value, bit, window(words, at + has_bit), 64, at + has_bit
    shift = np.uint64(zeros + 1)
    value = (zeros << k) | np.int64((bits >> shift) & ((_ONE << np.uint64(k)) - _ONE))
    if value > limit:
        return OVER_LIMIT, 0, bits, held, at
    has_bit = np.int64(zero_has_bit or value != 0)
    bit = np.int64((bits >> (shift + np.uint64(k))) & _ONE) & has_bit
    bits, held, at = _skip(words, bits, held, at, zeros + 1 + has_bit + k)
    return value, bit, bits, held, at


def padded_words(stream: np.ndarray, name: str = "rice.words") -> np.ndarray:
    """A stream's bytes as little-endian 64-bit words in the scratch array ``name``, zero past
    its end: four words past its last whole one, as far as the reader (``get``) reads."""
    whole = stream.size // 8
    words = scratch.buffer(name, whole + 4, np.uint64)
    words[whole:] = 0
    words.view(np.uint8)[: stream.size] = stream
    return words
