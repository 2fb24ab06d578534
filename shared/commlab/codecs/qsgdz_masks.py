"""qsgdz's MASKS frames (layout in qsgdz.QSGDZ): the compiled coders of the non-zero bitmap's
Huffman codes, the sign bits and the levels above 1, and the decoder, whose checks refuse every
payload that does not describe the frame's values, each in one line (CodecError)."""
from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from commlab.codecs import bitops, chunks, huffman, lanes, rice, scratch
from commlab.codecs.bitmaps import WORD
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.qsgd import level_steps, read_norms
from commlab.codecs.qsgdz_read import check_stream_end

_ONE = np.uint64(1)


@kernel(inline="always")
def ones_before_big(levels: np.ndarray, start: int, n: int) -> int:
    """The levels equal to 1 from ``start`` up to the next level above 1 (or to ``n``), 64 at a
    time (``levels`` zero past n up to a multiple of 64): the runs RICE and MASKS streams code."""
    count, block, low = 0, start // WORD, np.uint64(start % WORD)
    while WORD * block < n:
        first = WORD * block
        nonzero = ~lanes.equal_64(levels, first, 0) >> low << low
        big = ~lanes.below_64(levels, first, 2) >> low << low
        if big:
            return count + lanes.popcount(nonzero & ((big & (~big + _ONE)) - _ONE))
        count += lanes.popcount(nonzero)
        block, low = block + 1, np.uint64(0)
    return count


@kernel
def mask_words(levels: np.ndarray, words: np.ndarray) -> None:
    """The non-zero bitmap of byte levels (zero-padded to a multiple of 64) as ``words``."""
    for block in range(words.size):
        words[block] = ~lanes.equal_64(levels, WORD * block, 0)


@kernel
def code_masks(masks: np.ndarray, nbytes: int, codes: np.ndarray, lengths: np.ndarray, levels: np.ndarray,
               n: int, k_run: int, k_level: int, out: np.ndarray) -> int:
    """The MASKS stream into the words ``out``: the Huffman codes of the first ``nbytes`` bitmap
    bytes ``masks``, then the levels above 1 among the first ``n`` byte levels as RICE codes
    them; returns its bits. The codes of 4 bytes (at most 48 bits) go in one put: the register's
    state waits on one put per 4 bytes, not per byte."""
    acc, used, at = np.uint64(0), 0, 0
    for i in range(0, nbytes - nbytes % 4, 4):
        value, length = np.uint64(0), 0
        for j in range(4):
            value |= codes[masks[i + j]] << np.uint64(length)
            length += np.int64(lengths[masks[i + j]])
        acc, used, at = rice.put(out, acc, used, at, value, length)
    for i in range(nbytes - nbytes % 4, nbytes):
        acc, used, at = rice.put(out, acc, used, at, codes[masks[i]], np.int64(lengths[masks[i]]))
    acc, used, at = rice.put_code(out, acc, used, at, ones_before_big(levels, 0, n), k_run)
    for block in range(-(-n // WORD)):
        big = ~lanes.below_64(levels, WORD * block, 2)
        while big:
            i = WORD * block + np.int64(trailing_zeros(big))
            big &= big - _ONE
            acc, used, at = rice.put_code(out, acc, used, at, np.int64(levels[i]) - 2, k_level)
            acc, used, at = rice.put_code(out, acc, used, at, ones_before_big(levels, i + 1, n), k_run)
    return rice.flush(out, acc, used, at)


@kernel
def code_signs(negative: np.ndarray, nonzero: np.ndarray, out: np.ndarray) -> int:
    """The sign bits of the non-zero levels, in order, into the words ``out``: per bitmap word,
    the bits of ``negative`` under ``nonzero`` gathered (two puts of up to 32); returns the bits."""
    acc, used, at = np.uint64(0), 0, 0
    for w in range(nonzero.size):
        signs, count = bitops.pext(negative[w], nonzero[w]), lanes.popcount(nonzero[w])
        low = min(count, 32)
        acc, used, at = rice.put(out, acc, used, at, signs & ((_ONE << np.uint64(low)) - _ONE), low)
        acc, used, at = rice.put(out, acc, used, at, signs >> np.uint64(low), count - low)
    return rice.flush(out, acc, used, at)


# What the decoding kernels return when a stream does not describe the frame's values.
_PAST_END, _NO_CODE, _LEVEL_ABOVE, _RUN_OVERRUNS = range(-4, 0)
_ERRORS = {_PAST_END: "stream ends before its {what}", _NO_CODE: "bitmap stream holds bits that are no code",
           _LEVEL_ABOVE: "a level above the {levels} levels in the header",
           _RUN_OVERRUNS: "a run of levels 1 overruns the {nonzero} non-zero levels"}


@kernel
def _decode_masks(words: np.ndarray, end: int, table: np.ndarray, masks: np.ndarray) -> int:
    """The bitmap bytes ``masks`` from the codes at the start of the stream (``end`` bits in
    ``words``, padded as rice.py's reader reads them): a lookup of the next huffman.LIMIT bits
    gives one byte or two (huffman.decoding_table), four lookups a read of the stream, a read a
    lookup for the last bytes. Returns the bits read, or an error above.
    Past the end the padding reads as zeros, and a window is read only from before ``end``: a
    forged stream reads no further."""
    window, i, n, at = np.uint64((1 << huffman.LIMIT) - 1), 0, masks.size, 0
    while i + 8 <= n:  # 4 lookups (at most 48 bits) from one read of 64: no branch on what is left
        if at > end:
            return _PAST_END
        bits, taken, bad = rice.window(words, at), 0, False
        for _ in range(4):
            entry = table[np.int64(bits & window)]
            length = np.int64(entry >> 16) & 255
            bad |= length == 0
            masks[i], masks[i + 1] = np.uint8(entry & 255), np.uint8((entry >> 8) & 255)
            i += 1 + np.int64(entry >> 28)
            bits >>= np.uint64(length)
            taken += length
        if bad:
            return _NO_CODE
        at += taken
    while i < n:  # the last bytes, a read of the stream each; the very last one alone
        if at > end:
            return _PAST_END
        entry = table[np.int64(rice.window(words, at) & window)]
        pair = i + 1 < n
        length = (np.int64(entry >> 16) & 255) if pair else (np.int64(entry >> 24) & 15)
        if length == 0:
            return _NO_CODE
        masks[i] = np.uint8(entry & 255)
        if pair:
            masks[i + 1] = np.uint8((entry >> 8) & 255)
            i += np.int64(entry >> 28)
        i += 1
        at += length
    return at if at <= end else _PAST_END


@kernel
def _decode_big(words: np.ndarray, at: int, end: int, nonzero: int, top: int, k_run: int, k_level: int,
                index: np.ndarray, level: np.ndarray) -> tuple[int, int]:
    """The levels above 1 from bit ``at``: (the bits read or an error above, their count), each
    one's place among the non-zero levels into ``index`` and its level into ``level``."""
    bits, held, at = rice.start(words, at)
    run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero)
    if run < 0:
        return (_PAST_END if run == rice.PAST_END else _RUN_OVERRUNS), 0
    count, j = 0, run
    while j < nonzero:
        value, bits, held, at = rice.get_code(words, bits, held, at, end, k_level, top - 2)
        if value < 0:
            return (_PAST_END if value == rice.PAST_END else _LEVEL_ABOVE), count
        index[count], level[count] = j, value + 2
        count += 1
        run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero - 1 - j)
        if run < 0:
            return (_PAST_END if run == rice.PAST_END else _RUN_OVERRUNS), count
        j += run + 1
    return (at if at <= end else _PAST_END), count


@kernel
def _popcount(words: np.ndarray) -> int:
    total = 0
    for word in words:
        total += lanes.popcount(word)
    return total


@kernel
def _write_values(masks: np.ndarray, signs: np.ndarray, steps: np.ndarray, bucket: int, index: np.ndarray,
                  level: np.ndarray, out: np.ndarray) -> None:
    """The decoded vector: per 64 values, from their bitmap word and the next of the sign bits
    ``signs`` (spread over the word's set bits), the step of their bucket where the bitmap is
    set, negated where the sign bit is, +0 elsewhere (16 at a time where the 64 share a bucket,
    lanes.masked_signed); then the levels above 1 multiply their values."""
    n = out.size
    at, before, big, c, bucket_end = 0, 0, 0, 0, bucket
    for w in range(masks.size):
        nonzero, first = masks[w], WORD * w
        negative = bitops.pdep(rice.window(signs, at), nonzero)
        count = lanes.popcount(nonzero)
        at += count
        while first >= bucket_end:
            c, bucket_end = c + 1, bucket_end + bucket
        if first + WORD <= min(bucket_end, n):
            for q in range(4):
                shift = np.uint64(16 * q)
                lanes.masked_signed(steps[c], nonzero >> shift, negative >> shift, out, first + 16 * q)
        else:
            b, b_end = c, bucket_end
            for i in range(first, min(first + WORD, n)):
                if i >= b_end:
                    b, b_end = b + 1, b_end + bucket
                lane = np.uint64(i - first)
                value = steps[b] * np.float32((nonzero >> lane) & _ONE)
                out[i] = -value if (negative >> lane) & _ONE else value
        while big < index.size and index[big] < before + count:
            lane = np.int64(trailing_zeros(bitops.pdep(_ONE << np.uint64(index[big] - before), nonzero)))
            out[first + lane] *= np.float32(level[big])
            big += 1
        before += count


def decode_masks(name: str, numel: int, levels: int, bucket: int, nonzero: int, parameters: list,
                 payload: memoryview) -> np.ndarray:
    """The vector of a MASKS payload, validated."""
    k_gap, k_run, k_level = parameters
    if k_gap or max(k_run, k_level) > rice.MAX_PARAMETER:
        raise CodecError(f"{name}: bitmap frame with Rice parameters {tuple(parameters)}, not (0, k_run, k_level) "
                         f"up to {rice.MAX_PARAMETER}")
    if nonzero > numel:
        raise CodecError(f"{name}: {nonzero} non-zero levels for only {numel} values")
    norm_len, sign_len = 4 * chunks.count(numel, bucket), -(-nonzero // 8)
    head = norm_len + huffman.TABLE_BYTES + sign_len
    if len(payload) < head:
        raise CodecError(f"{name}: payload {len(payload)} bytes, shorter than the {head} bytes of bucket norms, "
                         f"code lengths and {nonzero} sign bits")
    norms = read_norms(name, payload, norm_len)
    packed = np.frombuffer(payload, np.uint8, huffman.TABLE_BYTES, norm_len)
    table = huffman.decoding_table(huffman.unpack_lengths(packed), name)
    signs = np.frombuffer(payload, np.uint8, sign_len, norm_len + huffman.TABLE_BYTES)
    if nonzero % 8 and signs[-1] >> (nonzero % 8):
        raise CodecError(f"{name}: sign bits have non-zero padding bits")
    stream = np.frombuffer(payload, np.uint8, offset=head)
    words, end = rice.padded_words(stream), 8 * stream.size
    masks = scratch.buffer("qsgdz.masks", -(-numel // WORD), np.uint64)
    nbytes = -(-numel // 8)
    masks.view(np.uint8)[nbytes:] = 0
    at = _decode_masks(words, end, table, masks.view(np.uint8)[:nbytes])
    if at < 0:
        raise CodecError(f"{name}: " + _ERRORS[at].format(what=f"{nbytes} bitmap bytes"))
    if numel % 8 and masks.view(np.uint8)[nbytes - 1] >> (numel % 8):
        raise CodecError(f"{name}: bitmap has bits set past the end of the vector")
    found = _popcount(masks)
    if found != nonzero:
        raise CodecError(f"{name}: bitmap has {found} non-zero levels, the header {nonzero}")
    index, level = scratch.buffer("qsgdz.big_index", nonzero, np.int64), scratch.buffer("qsgdz.big_level", nonzero,
                                                                                          np.int64)
    at, count = _decode_big(words, at, end, nonzero, levels, k_run, k_level, index, level)
    if at < 0:
        raise CodecError(f"{name}: " + _ERRORS[at].format(what="levels above 1", levels=levels, nonzero=nonzero))
    check_stream_end(name, stream, at)
    out = np.empty(numel, np.float32)
    _write_values(masks, rice.padded_words(signs, "qsgdz.sign_words"), level_steps(norms, levels), bucket,
                  index[:count], level[:count], out)
    return out
