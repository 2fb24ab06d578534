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

from commlab.codecs import draws, scratch, topk
from commlab.codecs.base import RandomCodec, register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel


def _cut(seed: int, numel: int, m: int) -> tuple[np.ndarray, int, np.ndarray]:
    """The top level of ``_subset`` over range(numel): (its random bytes, the byte value ``cut``
    below which every position is in the subset, and which of the positions whose byte is ``cut``
    are, in order, as a mask)."""
    keys = draws.keystream(struct.pack("<QQ", seed, 0), numel)
    cut, below = _below(keys, m)
    tied = int(np.count_nonzero(keys == cut))
    while below + tied < m:
        below += tied
        cut += 1
        tied = int(np.count_nonzero(keys == cut))
    return keys, cut, _subset(seed, 1, tied, m - below)


@kernel
def _gather(flags: np.ndarray, vec: np.ndarray, out: np.ndarray) -> None:
    """The values where ``flags`` is 1, in order, into ``out`` (one longer than their count).
    Every value is stored and the count advances past the kept ones: no branch to mispredict."""
    count = 0
    for i in range(flags.size):
        out[count] = vec[i]
        count += flags[i]


@kernel
def _scatter(flags: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """The whole vector: the next of ``values`` (one longer than their count) where ``flags`` is
    1, zero elsewhere, as bits: a value's bits and'ed with 0 or all ones (a select of floats
    compiles to a branch, mispredicted half the time)."""
    words, bits = out.view(np.uint32), values.view(np.uint32)
    count = 0
    for i in range(flags.size):
        words[i] = bits[count] & (np.uint32(0) - np.uint32(flags[i]))
        count += flags[i]


def _below(keys: np.ndarray, m: int) -> tuple[int, int]:
    """The byte value ``cut`` where the m-th smallest byte lies, and how many bytes are below it."""
    cut = min(255, m * 256 // keys.size)  # about where the m-th smallest byte lies
    below = np.count_nonzero(keys < cut)
    while below > m:
        cut -= 1
        below = np.count_nonzero(keys < cut)
    return cut, int(below)


def positions(seed: int, numel: int, k: int) -> np.ndarray:
    """The k sorted distinct int64 indices below ``numel`` that a frame seed selects: a uniformly
    random subset of m = min(k, D - k) positions (its complement when k > D / 2), see ``_subset``.
    Built from the AES-128-CTR keystream of (seed, level) alone (draws.py), so sender and receiver
    agree whatever their numpy. The codec itself marks the selection with a byte a position
    (_flags) without listing it."""
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
    cut, below = _below(keys, m)
    tied = np.flatnonzero(keys == cut)
    while below + tied.size < m:
        below += tied.size
        cut += 1
        tied = np.flatnonzero(keys == cut)
    chosen = keys < cut
    chosen[tied[_subset(seed, level + 1, tied.size, m - below)]] = True
    return chosen


_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)


@kernel
def _mark_ties(words: np.ndarray, rest: np.ndarray, cut: int, tied: np.ndarray, flags: np.ndarray) -> None:
    """flags at the positions whose byte is ``cut``, in order, from ``tied``: the bytes 8 at a
    time (``words``, then the ``rest``), a word looked into only when one of its bytes is the cut
    (the classic test for a zero byte, of the word xor the cut in every byte)."""
    pattern, tie = np.uint64(cut) * _ONES, 0
    for w in range(words.size):
        x = words[w] ^ pattern
        if (x - _ONES) & ~x & _HIGHS:
            for t in range(8):
                if (x >> np.uint64(8 * t)) & np.uint64(0xFF) == 0:
                    flags[8 * w + t] = tied[tie]
                    tie += 1
    for t in range(rest.size):
        if rest[t] == cut:
            flags[8 * words.size + t] = tied[tie]
            tie += 1


def _flags(seed: int, numel: int, k: int) -> np.ndarray:
    """One byte per position, 1 where a frame of ``seed`` keeps the value (``positions``), built
    by vectorised passes over the bytes of ``_cut``; a scratch array."""
    m = min(k, numel - k)
    flags = scratch.buffer("randomk.flags", numel, np.uint8)
    if m == 0:  # k == numel: every value
        flags[:] = 1
        return flags
    keys, cut, tied = _cut(seed, numel, m)
    np.less(keys, cut, out=flags.view(np.bool_))
    whole = numel // 8 * 8
    _mark_ties(keys[:whole].view(np.uint64), keys[whole:], cut, tied, flags)
    if m != k:  # the complement
        flags ^= 1
    return flags


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
        out = np.empty(k + 1, np.float32)
        if k:
            _gather(_flags(seed, vec.size, k), vec, out)
        return (seed, k), [out[:k]]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        seed, k = params
        if k > numel:
            raise CodecError(f"{self.name}: {k} kept values for only {numel} elements")
        if len(payload) != 4 * k:
            raise CodecError(f"{self.name}: payload {len(payload)} bytes, {k} float32 values need {4 * k}")
        if k == 0:
            return np.zeros(numel, np.float32)
        out, values = np.empty(numel, np.float32), np.zeros(k + 1, np.float32)
        values[:k] = np.frombuffer(payload, "<f4")
        _scatter(_flags(seed, numel, k), values, out)
        return out

    def payload_size(self, numel: int) -> int:
        return 4 * topk.num_kept(numel, self.ratio)
