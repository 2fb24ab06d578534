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
seed (``positions``; wire version 2: from an AES keystream, version 1 took numpy's PCG64 stream).
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
    Built from the AES-128-CTR keystream of (seed, level) alone (draws.py), so sender and receiver
    agree whatever their numpy. The codec itself selects 16 positions at a time from the bytes
    (``_block_mask``) without listing them."""
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
    keys = draws.keystream(struct.pack("<QQ", seed, level), n)
    cut, below, _ = _below(keys, m)
    chosen = keys < cut
    tied = np.flatnonzero(keys == cut)
    chosen[tied[_subset(seed, level + 1, tied.size, m - below)]] = True
    return chosen


_ALL_LANES = np.uint32(0xFFFF)


@kernel(inline="always")
def _block_mask(keys: np.ndarray, start: int, cut: int, tied: np.ndarray, tie: int, flip: np.uint32,
                valid: np.uint32) -> tuple[np.uint32, int]:
    """The kept lanes of the 16 positions from ``start`` (those of ``valid``) and the index of the
    next tie: a byte below the cut, or at the cut and chosen by the next of ``tied`` (about one
    block in 16 holds a tie), all flipped where the frame keeps the complement."""
    mask = lanes.below(keys, start, cut)
    ties = lanes.equal(keys, start, cut) & valid
    while ties:
        lowest = ties & (np.uint32(0) - ties)
        if tied[tie]:
            mask |= lowest
        tie += 1
        ties ^= lowest
    return (mask ^ flip) & valid, tie


@kernel(inline="always")
def _last_mask(keys: np.ndarray, cut: int, tied: np.ndarray, tie: int, flip: np.uint32) -> np.ndarray:
    """The kept lanes of the partial last block (``_block_mask``), as an array of that one mask,
    from a copy of its bytes padded to 16."""
    whole = keys.size // LANES * LANES
    last, mask = np.zeros(LANES, np.uint8), np.zeros(1, np.uint16)
    last[: keys.size - whole] = keys[whole:]
    mask[0] = _block_mask(last, 0, cut, tied, tie, flip, np.uint32((1 << (keys.size - whole)) - 1))[0]
    return mask


@kernel
def _pack(keys: np.ndarray, cut: int, tied: np.ndarray, flip: np.uint32, vec: np.ndarray, out: np.ndarray) -> None:
    """The kept values of ``vec`` (``_block_mask``), in order, into ``out`` (16 longer than their
    count): each block's mask used as it is found, no array of masks written and read back; a
    partial last block through lanes.pack_blocks."""
    whole, tie, count = keys.size // LANES, 0, 0
    for b in range(whole):
        mask, tie = _block_mask(keys, b * LANES, cut, tied, tie, flip, _ALL_LANES)
        lanes.compress(vec, b * LANES, mask, out, count)
        count += lanes.popcount(mask)
    if whole * LANES < keys.size:
        lanes.pack_blocks(_last_mask(keys, cut, tied, tie, flip), vec[whole * LANES:], out[count:])


@kernel
def _spread(keys: np.ndarray, cut: int, tied: np.ndarray, flip: np.uint32, values: np.ndarray,
            out: np.ndarray) -> None:
    """The whole of ``out``: the next of ``values`` at each kept position (``_block_mask``), zero
    elsewhere, as ``_pack`` finds the masks; a partial last block through lanes.spread_blocks."""
    whole, tie, count = keys.size // LANES, 0, 0
    for b in range(whole):
        mask, tie = _block_mask(keys, b * LANES, cut, tied, tie, flip, _ALL_LANES)
        lanes.expand(values, count, mask, out, b * LANES)
        count += lanes.popcount(mask)
    if whole * LANES < keys.size:
        lanes.spread_blocks(_last_mask(keys, cut, tied, tie, flip), values[count:], out[whole * LANES:])


def _selection(seed: int, numel: int, k: int) -> tuple[np.ndarray, int, np.ndarray, np.uint32]:
    """A frame's positions (``positions``), 0 < k <= numel, as what ``_block_mask`` takes (keys,
    cut, tied, flip; ``_pack`` and ``_spread`` take them as they are): the top level of
    ``_subset`` from the keystream's bytes, flipped where the frame keeps the complement of the
    subset (k > D / 2)."""
    m = min(k, numel - k)
    keys = draws.keystream(struct.pack("<QQ", seed, 0), numel)
    cut, below, tied = _below(keys, m)
    return keys, cut, _subset(seed, 1, tied, m - below), np.uint32(0 if m == k else _ALL_LANES)


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
