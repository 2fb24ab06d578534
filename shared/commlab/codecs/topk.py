"""fp32_sparse: keep the k = ceil(ratio * D) largest-magnitude values; send compact indices
(indices.py) and the kept values as float32."""
from __future__ import annotations

import math
import struct

import numpy as np

from commlab.codecs import indices, lanes, scratch, wire
from commlab.codecs.base import Codec, register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.lanes import LANES


def check_ratio(ratio: float) -> float:
    if not 0.0 < ratio <= 1.0:
        raise CodecError(f"top-k ratio must be in (0, 1], got {ratio!r}")
    return float(ratio)


def num_kept(numel: int, ratio: float) -> int:
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def magnitudes(vec: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """|vec| as uint32 keys in the order of the magnitudes: a float32's bits without its sign bit
    (NaN above inf above every finite value, as numpy sorts NaN last)."""
    return np.bitwise_and(vec.view(np.uint32), np.uint32(0x7FFFFFFF), out=out)


# The sample that places the threshold: about this many values, and the rank this many standard
# deviations below the k-th largest, so that at least k values pass unless the data is adversarial.
# The result does not depend on the sample, only the time: a larger sample costs its partition, a
# smaller one a wider band of candidates to partition.
_SAMPLE = 1 << 15
_MARGIN_SIGMAS = 6.0
_MAGNITUDE = np.uint32(0x7FFFFFFF)


@kernel
def _flagged(vec: np.ndarray, low: np.uint32, positions: np.ndarray, values: np.ndarray) -> int:
    """The positions whose magnitude key is >= low, in order, into ``positions`` and their values
    into ``values`` (each 16 longer than their count); returns the count. 16 at a time, each
    block's mask from its bits (lanes.magnitude_at_least: no array of magnitudes written and read
    back); the values past the last whole block one at a time."""
    bits, count = vec.view(np.uint32), 0
    whole = bits.size // LANES * LANES
    for start in range(0, whole, LANES):
        mask = lanes.magnitude_at_least(bits, start, low)
        lanes.compress_positions(start, mask, positions, count)
        lanes.compress(vec, start, mask, values, count)
        count += lanes.popcount(mask)
    for i in range(whole, bits.size):
        positions[count], values[count] = i, vec[i]
        count += (bits[i] & _MAGNITUDE) >= low
    return count


@kernel
def _below(keys: np.ndarray, high: np.uint32, out: np.ndarray) -> int:
    """The keys below ``high`` into ``out`` (16 longer than their count), 16 at a time; their count."""
    whole, count = keys.size // LANES * LANES, 0
    for start in range(0, whole, LANES):
        mask = lanes.below(keys, start, high)
        lanes.compress(keys, start, mask, out, count)
        count += lanes.popcount(mask)
    for key in keys[whole:]:
        out[count] = key
        count += key < high
    return count


@kernel
def _keep(candidates: np.ndarray, keys: np.ndarray, values: np.ndarray, kth: np.uint32, ties: int,
          positions: np.ndarray, kept: np.ndarray) -> None:
    """The candidates whose key is above ``kth``, and the first ``ties`` equal to it, in order, into
    ``positions`` and their values into ``kept`` (each 16 longer than their count), 16 at a time;
    the ties taken lane by lane while any remain."""
    whole, count = keys.size // LANES * LANES, 0
    for start in range(0, whole, LANES):
        mask = lanes.above(keys, start, kth)
        tied = lanes.equal(keys, start, kth) if ties > 0 else np.uint32(0)
        while tied and ties > 0:
            lowest = tied & (np.uint32(0) - tied)
            mask |= lowest
            tied ^= lowest
            ties -= 1
        lanes.compress(candidates, start, mask, positions, count)
        lanes.compress(values, start, mask, kept, count)
        count += lanes.popcount(mask)
    for j in range(whole, keys.size):
        tie = (keys[j] == kth) & (ties > 0)
        ties -= tie
        positions[count], kept[count] = candidates[j], values[j]
        count += (keys[j] > kth) | tie


_DIGITS = ((21, 11), (10, 11), (0, 10))  # (shift, bits) of the keys' digits, high to low


@kernel
def _kth_smallest(keys: np.ndarray, rank: int) -> np.uint32:
    """The key at ``rank`` (from 0) in sorted order, as np.partition places it: a radix select,
    one digit a pass from the highest, each pass counting the digits of the keys that agree with
    those found so far. Those keys are copied out after each pass (a small share of them after
    the first), so that the later passes count only them instead of passing over every key again."""
    counts = np.zeros(1 << 11, np.int64)
    value, known, agreeing, digit = np.uint32(0), np.uint32(0), keys, 0
    for shift, bits in _DIGITS:
        if known:
            agreeing = _agreeing(agreeing, known, value, counts[digit])
        counts[:] = 0
        digits = np.uint32((1 << bits) - 1)
        for key in agreeing:
            counts[(key >> np.uint32(shift)) & digits] += 1
        digit = 0
        while rank >= counts[digit]:
            rank -= counts[digit]
            digit += 1
        value |= np.uint32(digit) << np.uint32(shift)
        known |= digits << np.uint32(shift)
    return value


@kernel(inline="always")
def _agreeing(keys: np.ndarray, known: np.uint32, value: np.uint32, count: int) -> np.ndarray:
    """The ``count`` keys whose bits ``known`` are ``value``'s, in a new array (one slot longer:
    every key is written, and the next one overwrites those that do not agree)."""
    out, kept = np.empty(count + 1, np.uint32), 0
    for key in keys:
        out[kept] = key
        kept += (key & known) == value
    return out[:count]


def _candidates(vec: np.ndarray, low: np.uint32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, keys, values): the positions whose magnitude key is >= low, in order (int32),
    their keys and their values, views of work arrays. The work arrays, sized for the worst case,
    are touched (made resident) only as far as they fill. The keys from the candidates' values
    afterwards: packing them in the pass over the vector cost more than this pass over a few
    more than k values."""
    n = vec.size
    found = scratch.buffer("topk.candidates", n + LANES, np.int32)
    values = scratch.buffer("topk.values", n + LANES, np.float32)
    count = _flagged(vec, low, found, values)
    keys = magnitudes(values[:count], scratch.buffer("topk.keys", count, np.uint32))
    return found[:count], keys, values[:count]


def select(vec: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """(sorted positions, their values) of the k largest |vec| values; among equal magnitudes at
    the k-th the first positions (``reference_select``). Without sorting the vector: a threshold
    from a strided sample keeps a few more than k candidates, whose exact k-th magnitude is found
    among them. The candidates' values are packed with them, in the pass over the vector: reading
    the kept ones afterwards at their positions took 1.9 ms of a 10M vector's 7 (cache misses).
    int32 positions (a frame holds at most wire.MAX_NUMEL = 2**31 values: every position fits),
    which the loops pack 16 at a time (lanes.py takes 4-byte elements only)."""
    n = vec.size
    if n > wire.MAX_NUMEL:
        raise CodecError(f"top-k: {n} values exceed the {wire.MAX_NUMEL} a frame holds")
    k = num_kept(n, ratio)
    if k == n:
        return np.arange(k, dtype=np.int32), vec
    stride = max(1, n // _SAMPLE)
    sample = magnitudes(vec[::stride])
    # Ranks in the sample just below and above the k-th largest: the margin is in binomial
    # standard deviations, so that the k-th largest lies between them.
    expect = sample.size * (n - k) / n
    margin = _MARGIN_SIGMAS * math.sqrt(sample.size * (k / n) * (1 - k / n)) + 1
    low, high = int(expect - margin), int(expect + margin)
    candidates, sure_above = None, None
    if 0 < low and high < sample.size:
        candidates, chosen, values = _candidates(vec, _kth_smallest(sample, low))
        sure_above = _kth_smallest(sample, high)
    if candidates is None or candidates.size < k:  # no sample, or it misled the low mark: every value is a candidate
        candidates, chosen, values, sure_above = np.arange(n, dtype=np.int32), magnitudes(vec), vec, None
    # When at most k candidates reach the high mark, all of them are kept, and the k-th
    # magnitude is found among the others.
    band = chosen
    if sure_above is not None:
        band = scratch.buffer("topk.band", chosen.size + LANES, np.uint32)
        band = band[: _below(chosen, sure_above, band)]
    need = k - (chosen.size - band.size)
    if need <= 0:
        band, need = chosen, k
    kth = _kth_smallest(band, band.size - need)
    # The candidates above the k-th: those of the band, and all outside it (at least the high mark).
    above = chosen.size - band.size + np.count_nonzero(band > kth)
    positions, kept = np.empty(k + LANES, np.int32), np.empty(k + LANES, np.float32)
    _keep(candidates, chosen, values, kth, k - above, positions, kept)
    return positions[:k], kept[:k]


def spread(masks: np.ndarray, values: np.ndarray, numel: int) -> np.ndarray:
    """The vector of ``numel`` float32 values with ``values`` at the positions of ``masks``
    (indices.decode_masks), zero elsewhere: every value written once, 16 at a time
    (lanes.spread_blocks; zeroing the vector and storing the values at their positions took
    twice as long)."""
    out = np.empty(numel, np.float32)
    lanes.spread_blocks(masks, values, out)
    return out


@kernel
def scatter_add(idx: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """out[idx] += values for validated indices (distinct: a decoded frame's)."""
    for j in range(idx.size):
        out[idx[j]] += values[j]


def reference_select(vec: np.ndarray, ratio: float) -> np.ndarray:
    """The definition: the k first positions in order of decreasing |vec| (ties: lower position first)."""
    k = num_kept(vec.size, ratio)
    return np.sort(np.argsort(-magnitudes(vec).astype(np.int64), kind="stable")[:k])


def split_sparse(
    payload: memoryview, numel: int, k: int, mode: int, index_len: int, what: str, decode=indices.decode
) -> tuple[np.ndarray, memoryview]:
    """Decode the index section at the start of a sparse payload; return (indices, rest of
    payload). ``decode``: indices.decode (the positions) or indices.decode_masks (their masks)."""
    if k > numel:
        raise CodecError(f"{what}: {k} kept values for only {numel} elements")
    if index_len > len(payload):
        raise CodecError(f"{what}: {index_len}-byte index section overruns the {len(payload)}-byte payload")
    return decode(mode, np.frombuffer(payload, np.uint8, index_len), numel, k), payload[index_len:]


@register
class TopK(Codec):
    name = "fp32_sparse"
    codec_id = 3
    lossy = True
    sized_by_content = True
    params_struct = struct.Struct("<QBQ")  # k, index coding mode, index section bytes

    def __init__(self, ratio: float = 0.10, **kw) -> None:
        super().__init__(**kw)
        self.ratio = check_ratio(ratio)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        idx, values = select(vec, self.ratio)
        mode, idx_bytes = indices.encode(idx, vec.size)
        return (idx.size, mode, idx_bytes.size), [idx_bytes, values]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        k, mode, index_len = params
        masks, rest = split_sparse(payload, numel, k, mode, index_len, self.name, indices.decode_masks)
        if len(rest) != 4 * k:
            raise CodecError(f"{self.name}: {len(rest)} value bytes for {k} float32 values")
        return spread(masks, np.frombuffer(rest, "<f4"), numel)

    def payload_size(self, numel: int) -> int:
        k = num_kept(numel, self.ratio)
        return indices.bound(numel, k) + 4 * k
