"""Canonical Huffman codes of bytes, at most LIMIT bits long, for qsgdz's MASKS frames (the bytes
of the non-zero bitmap): the code lengths from the bytes' counts, the codes from the lengths (as
DEFLATE makes them), a decoding table from the lengths, and the lengths' 128-byte form in a frame.

A code is written to rice.py's bit stream low bit first, so each code here is the canonical
code's bits reversed: a reader takes the next LIMIT bits as an index into the table, which gives
the byte and its length (and the next byte's where its code fits in the same bits). Lengths of LIMIT = 12 bits keep the table at 4096 entries (8 KiB, in L1);
where the optimal lengths run longer (rare bytes), they are shortened as JPEG's encoder does
(ITU T.81, K.3): the result is a complete code, a little longer than optimal on the rare bytes.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel

LIMIT = 12
SYMBOLS = 256
TABLE_BYTES = SYMBOLS // 2  # lengths 0..LIMIT, a nibble each


@kernel
def _optimal_lengths(counts: np.ndarray, order: np.ndarray, lengths: np.ndarray) -> None:
    """Huffman code lengths of the symbols ``order`` (counts ascending, every count above 0, two
    or more) into ``lengths``: the two-queue construction (leaves in order, internal nodes in the
    order they are made, which is also ascending), then each node's depth from the root down."""
    m = order.size
    weight = np.empty(2 * m - 1, np.int64)
    parent = np.empty(2 * m - 1, np.int64)
    for i in range(m):
        weight[i] = counts[order[i]]
    leaf, inner = 0, m
    for made in range(m, 2 * m - 1):
        pair = 0
        for _ in range(2):  # the lighter of the next leaf and the next internal node, twice
            if leaf < m and (inner >= made or weight[leaf] <= weight[inner]):
                parent[leaf], pair, leaf = made, pair + weight[leaf], leaf + 1
            else:
                parent[inner], pair, inner = made, pair + weight[inner], inner + 1
        weight[made] = pair
    depth = np.zeros(2 * m - 1, np.int64)
    for node in range(2 * m - 3, -1, -1):  # the root, 2m - 2, is at depth 0
        depth[node] = depth[parent[node]] + 1
    for i in range(m):
        lengths[order[i]] = depth[i]


def code_lengths(counts: np.ndarray) -> np.ndarray:
    """uint8[256]: the length of each byte's code (0: the byte does not occur), at most LIMIT,
    from the bytes' counts. One byte alone gets a code of 1 bit."""
    present = np.flatnonzero(counts)
    lengths = np.zeros(SYMBOLS, np.int64)
    if present.size == 1:
        lengths[present] = 1
    elif present.size > 1:
        order = present[np.argsort(counts[present], kind="stable")]
        _optimal_lengths(counts, order, lengths)
        _shorten(lengths, order[::-1].copy())
    return lengths.astype(np.uint8)


@kernel
def _shorten(lengths: np.ndarray, by_count: np.ndarray) -> None:
    """Lengths of at most LIMIT bits for the symbols ``by_count`` (counts descending) in place,
    from the counts of codes of each length as T.81 K.3 adjusts them: two codes of the longest
    length go, one of them becoming a code one shorter, the other moving under a shorter code
    split in two. The shortest lengths then go to the most frequent symbols (as before, where
    no length was above LIMIT)."""
    per_length = np.zeros(2 * SYMBOLS, np.int64)
    longest = 0
    for symbol in by_count:
        per_length[lengths[symbol]] += 1
        longest = max(longest, lengths[symbol])
    for length in range(longest, LIMIT, -1):
        while per_length[length]:
            shorter = length - 2
            while per_length[shorter] == 0:
                shorter -= 1
            per_length[length] -= 2
            per_length[length - 1] += 1
            per_length[shorter + 1] += 2
            per_length[shorter] -= 1
    rank = 0
    for length in range(1, LIMIT + 1):
        for _ in range(per_length[length]):
            lengths[by_count[rank]] = length
            rank += 1


@kernel
def codes(lengths: np.ndarray) -> np.ndarray:
    """uint64[256]: each byte's canonical code (shorter codes first, then by byte, as DEFLATE
    assigns them), bits reversed for a stream written low bit first."""
    first = np.zeros(LIMIT + 2, np.int64)  # the first code of each length
    per_length = np.zeros(LIMIT + 1, np.int64)
    for symbol in range(SYMBOLS):
        per_length[lengths[symbol]] += 1
    per_length[0] = 0
    code = 0
    for length in range(1, LIMIT + 1):
        code = (code + per_length[length - 1]) << 1
        first[length] = code
    out = np.zeros(SYMBOLS, np.uint64)
    for symbol in range(SYMBOLS):
        length = np.int64(lengths[symbol])
        if length:
            code, first[length] = first[length], first[length] + 1
            reversed_ = 0
            for bit in range(length):
                reversed_ |= ((code >> bit) & 1) << (length - 1 - bit)
            out[symbol] = reversed_
    return out


def decoding_table(lengths: np.ndarray, what: str) -> np.ndarray:
    """uint32[2**LIMIT]: under each LIMIT-bit window of the stream, its first code's byte (bits
    0-7) and length (bits 24-27), and where a second code follows within the window, that code's
    byte (bits 8-15) and bit 28 set; bits 16-23 the length of the code or codes (0 for a window
    no code starts, which a decoder refuses). A decoder takes two bytes a lookup where codes are
    short. CodecError where the lengths are not a prefix code (Kraft's sum above 1)."""
    if int(lengths.max(initial=0)) > LIMIT:
        raise CodecError(f"{what}: a code length above {LIMIT} bits")
    if int((np.int64(1) << (LIMIT - lengths[lengths > 0].astype(np.int64))).sum()) > 1 << LIMIT:
        raise CodecError(f"{what}: code lengths that are no prefix code")
    table = np.zeros(1 << LIMIT, np.uint32)
    _fill_table(lengths, codes(lengths), table)
    return table


@kernel
def _fill_table(lengths: np.ndarray, codes: np.ndarray, table: np.ndarray) -> None:
    for symbol in range(SYMBOLS):
        length = np.int64(lengths[symbol])
        if length:
            for window in range(np.int64(codes[symbol]), table.size, 1 << length):
                table[window] = symbol | (length << 16) | (length << 24)
    for window in range(table.size):  # a second code after the first, read from its own window's entry
        first = np.int64(table[window] >> 24) & 15
        if first:
            after = table[window >> first]
            second = np.int64(after >> 24) & 15
            if second and first + second <= LIMIT:
                table[window] = ((table[window] & 255) | ((after & 255) << 8) | ((first + second) << 16)
                                 | (first << 24) | (1 << 28))


def pack_lengths(lengths: np.ndarray) -> np.ndarray:
    """The 128 bytes of a frame's lengths: byte b holds symbol 2b's length low, 2b + 1's high."""
    return (lengths[0::2] | (lengths[1::2] << 4)).astype(np.uint8)


def unpack_lengths(packed: np.ndarray) -> np.ndarray:
    lengths = np.empty(SYMBOLS, np.uint8)
    lengths[0::2], lengths[1::2] = packed & 15, packed >> 4
    return lengths
