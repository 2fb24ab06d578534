"""randomk: random-k sparsification (rand_k of Stich, Cordonnier, Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018): keep k = ceil(ratio * D) coordinates (default ratio 0.5) chosen uniformly
at random, unscaled (the kept values are exact, so the codec is biased by k/D; pair it with
``ErrorFeedback``, the paper's memory).

Why 0.5: with error feedback a coordinate waits D/k steps on average before it is sent, and its
residual grows all that time. Unlike top-k, which sends the large coordinates first, a random
subset has no preference, so the delay hits the important coordinates too. Measured (accuracy
delta to fp32/dense; FL: 2 clients, 10 rounds of 6000 samples; DDP: WORLD=3, 2 epochs, 20000
samples, momentum 0.9):

    ratio   delay       FL 10 rounds   DDP 2 epochs
    0.01    100 steps   -55.7 pp       -87.4 pp (diverged)
    0.1     10          -15.2          -23.1 (-5.5 with DGC's momentum correction and masking)
    0.3     3.3         -1.0           -2.1
    0.5     2           +0.0           -0.6

In FL one round is one step, so 10 rounds cannot absorb a delay of 10. At 0.5 randomk sends half
the fp32 bytes (the values only, no indices); top-k (fp32_sparse) at 10 % is the better
compressor at 0.125x. randomk is the baseline that shows what choosing the coordinates buys.

Over the wire: the parameters carry a 64-bit seed and k, the payload only the k kept float32
values, in increasing index order; no indices. The receiver regenerates the index set from the
seed (``positions``; wire version 4: from draws.py's key bytes, versions 2 and 3 took an AES
keystream, version 1 numpy's PCG64 stream).
The encoder draws a fresh seed per frame from its own Generator (constructor ``seed``, default 0; a node's is its codec seed, commlab.runs.seeds),
so successive frames keep different coordinates, and two codecs built with the same seed give the
same frames for the same inputs in the same order.
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import draws, lanes, topk
from commlab.codecs.base import RandomCodec, register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.lanes import LANES


@kernel
def _tally(keys: np.ndarray, cut: int) -> tuple[int, int]:
    """How many bytes are below ``cut``, and how many equal it: 64 at a time, the rest one by one."""
    whole, below, equal = keys.size // lanes.BYTE_LANES * lanes.BYTE_LANES, 0, 0
    for start in range(0, whole, lanes.BYTE_LANES):
        below += lanes.popcount(lanes.below_64(keys, start, cut))
        equal += lanes.popcount(lanes.equal_64(keys, start, cut))
    for key in keys[whole:]:
        below += key < cut
        equal += key == cut
    return below, equal


@kernel
def _below(keys: np.ndarray, m: int) -> tuple[int, int, int]:
    """The byte value ``cut`` where the m-th smallest byte lies, how many bytes are below it and
    how many equal it. Compiled, search and all: on the few bytes of the deeper levels the first
    guess is off by several values, a tally each, and each call from Python cost more than its tally."""
    cut = min(255, m * 256 // keys.size)  # about where the m-th smallest byte lies
    below, tied = _tally(keys, cut)
    while below > m:
        cut -= 1
        below, tied = _tally(keys, cut)
    while below + tied < m:
        cut += 1
        below, tied = _tally(keys, cut)
    return cut, below, tied


def positions(seed: int, numel: int, k: int) -> np.ndarray:
    """The k sorted distinct int64 indices below ``numel`` that a frame seed selects: a uniformly
    random subset of m = min(k, D - k) positions (its complement when k > D / 2), see ``_subset``.
    Built from the key bytes of (seed, level) alone (draws.py), so sender and receiver
    agree whatever their numpy. The codec itself selects 16 positions at a time from the bytes
    (``_span_mask``) without listing them."""
    m = min(k, numel - k)
    chosen = _subset(seed, 0, numel, m)
    return np.flatnonzero(chosen if m == k else ~chosen)


def _subset(seed: int, level: int, n: int, m: int) -> np.ndarray:
    """A uniformly random m-subset of range(n), as a mask: one random byte per position, the
    positions with the smallest bytes, and among those tied at the last byte value needed a
    uniform subset of them, chosen the same way one level down (about n / 256 positions). The
    bytes are exchangeable and every choice depends only on their multiset, so every m-subset
    is equally likely."""
    if m == 0 or m == n:
        return np.full(n, m == n)
    keys = draws.key_bytes(seed, level, n)
    cut, below, _ = _below(keys, m)
    chosen = keys < cut
    tied = np.flatnonzero(keys == cut)
    chosen[tied[_subset(seed, level + 1, tied.size, m - below)]] = True
    return chosen


_SPAN = lanes.BYTE_LANES  # positions whose mask one pair of 64-byte compares finds
_ALL_LANES = ~np.uint64(0)
_BLOCK_LANES = np.uint64(0xFFFF)


@kernel(inline="always")
def _span_mask(keys: np.ndarray, start: int, cut: int, tied: np.ndarray, tie: int, flip: np.uint64,
               valid: np.uint64) -> tuple[np.uint64, int]:
    """The kept lanes of the 64 positions from ``start`` (those of ``valid``) and the index of the
    next tie: a byte below the cut, or at the cut and chosen by the next of ``tied`` (about one
    span in 4 holds a tie), all flipped where the frame keeps the complement. 64 at a time, then
    split into blocks of 16 (``_block``): one compare of 16 bytes a block took a third longer."""
    mask = lanes.below_64(keys, start, cut)
    ties = lanes.equal_64(keys, start, cut) & valid
    while ties:
        lowest = ties & (np.uint64(0) - ties)
        if tied[tie]:
            mask |= lowest
        tie += 1
        ties ^= lowest
    return (mask ^ flip) & valid, tie


@kernel(inline="always")
def _block(span: np.uint64, q: int) -> np.uint32:
    """The mask of the q-th block of 16 of a span's mask."""
    return np.uint32((span >> np.uint64(LANES * q)) & _BLOCK_LANES)


@kernel(inline="always")
def _last_masks(keys: np.ndarray, cut: int, tied: np.ndarray, tie: int, flip: np.uint64) -> np.ndarray:
    """The kept lanes of the positions past the last whole span (``_span_mask``), one uint16 mask
    per block of 16 (the last partial), from a copy of their bytes padded to 64."""
    whole = keys.size // _SPAN * _SPAN
    rest = keys.size - whole
    last = np.zeros(_SPAN, np.uint8)
    last[:rest] = keys[whole:]
    span = _span_mask(last, 0, cut, tied, tie, flip, (np.uint64(1) << np.uint64(rest)) - np.uint64(1))[0]
    masks = np.empty(-(-rest // LANES), np.uint16)
    for q in range(masks.size):
        masks[q] = _block(span, q)
    return masks


@kernel
def _pack(keys: np.ndarray, cut: int, tied: np.ndarray, flip: np.uint64, vec: np.ndarray, out: np.ndarray) -> None:
    """The kept values of ``vec`` (``_span_mask``), in order, into ``out`` (16 longer than their
    count): each span's mask used as it is found, no array of masks written and read back; the
    positions past the last whole span through lanes.pack_blocks."""
    whole, tie, count = keys.size // _SPAN, 0, 0
    for s in range(whole):
        span, tie = _span_mask(keys, s * _SPAN, cut, tied, tie, flip, _ALL_LANES)
        for q in range(_SPAN // LANES):
            mask = _block(span, q)
            lanes.compress(vec, s * _SPAN + q * LANES, mask, out, count)
            count += lanes.popcount(mask)
    if whole * _SPAN < keys.size:
        lanes.pack_blocks(_last_masks(keys, cut, tied, tie, flip), vec[whole * _SPAN:], out[count:])


@kernel
def _spread(keys: np.ndarray, cut: int, tied: np.ndarray, flip: np.uint64, values: np.ndarray,
            out: np.ndarray) -> None:
    """The whole of ``out``: the next of ``values`` at each kept position (``_span_mask``), zero
    elsewhere, as ``_pack`` finds the masks; the positions past the last whole span through
    lanes.spread_blocks."""
    whole, tie, count = keys.size // _SPAN, 0, 0
    for s in range(whole):
        span, tie = _span_mask(keys, s * _SPAN, cut, tied, tie, flip, _ALL_LANES)
        for q in range(_SPAN // LANES):
            mask = _block(span, q)
            lanes.expand(values, count, mask, out, s * _SPAN + q * LANES)
            count += lanes.popcount(mask)
    if whole * _SPAN < keys.size:
        lanes.spread_blocks(_last_masks(keys, cut, tied, tie, flip), values[count:], out[whole * _SPAN:])


def _selection(seed: int, numel: int, k: int) -> tuple[np.ndarray, int, np.ndarray, np.uint64]:
    """A frame's positions (``positions``), 0 < k <= numel, as what ``_span_mask`` takes (keys,
    cut, tied, flip; ``_pack`` and ``_spread`` take them as they are): the top level of
    ``_subset`` from the key bytes, flipped where the frame keeps the complement of the
    subset (k > D / 2)."""
    m = min(k, numel - k)
    keys = draws.key_bytes(seed, 0, numel)
    cut, below, tied = _below(keys, m)
    return keys, cut, _subset(seed, 1, tied, m - below), np.uint64(0) if m == k else _ALL_LANES


@register
class RandomK(RandomCodec):
    name = "randomk"
    codec_id = 9
    lossy = True
    params_struct = struct.Struct("<QQ")  # index seed, k

    def __init__(self, ratio: float = 0.5, seed: int | np.random.Generator | None = 0, **kw) -> None:
        super().__init__(**kw)
        self.ratio = topk.check_ratio(ratio)
        self.rng = np.random.default_rng(seed)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        k = topk.num_kept(vec.size, self.ratio)
        seed = int(self.rng.integers(2**64, dtype=np.uint64))
        out = np.empty(k + LANES, np.float32)
        if k:
            _pack(*_selection(seed, vec.size, k), vec, out)
        return (seed, k), [out[:k]]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        seed, k = params
        if k > numel:
            raise CodecError(f"{self.name}: {k} kept values for only {numel} elements")
        if len(payload) != 4 * k:
            raise CodecError(f"{self.name}: payload {len(payload)} bytes, {k} float32 values need {4 * k}")
        if k == 0:
            return np.zeros(numel, np.float32)
        out = np.empty(numel, np.float32)
        _spread(*_selection(seed, numel, k), np.frombuffer(payload, "<f4"), out)
        return out

    def payload_size(self, numel: int) -> int:
        return 4 * topk.num_kept(numel, self.ratio)
