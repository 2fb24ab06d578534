"""randomk: random-k sparsification (rand_k of Stich, Cordonnier, Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018): keep k = ceil(ratio * D) coordinates (default ratio 0.01) chosen uniformly
at random, unscaled (the kept values are exact, so the codec is biased by k/D; pair it with
``ErrorFeedback``, the paper's memory).

Over the wire: the parameters carry a 64-bit seed and k, the payload only the k kept float32
values, in increasing index order; no indices. The receiver regenerates the index set from the
seed (``positions``). The encoder draws a fresh seed per frame from its own Generator
(constructor ``seed``, default 0), so successive frames keep different coordinates, and two
codecs built with the same seed give the same frames for the same inputs in the same order.
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import topk
from commlab.codecs.base import Codec, register
from commlab.codecs.errors import CodecError


def positions(seed: int, numel: int, k: int) -> np.ndarray:
    """The k sorted distinct int64 indices below ``numel`` that a frame seed selects.

    Uses only the raw PCG64 stream of ``PCG64(seed)``, which numpy keeps stable across versions
    (``Generator.choice`` is not guaranteed to), so sender and receiver agree even when their numpy
    differs. Draws i.i.d. uniform indices (raw % numel; bias below numel / 2**64) and repeats for
    the missing count until m distinct ones are found: a process symmetric under any relabelling
    of the indices, so the m-subset is uniform. m is the smaller of k and D - k (then the subset is
    the complement), so at least half of each round's draws are new in expectation.
    """
    m = min(k, numel - k)
    bits = np.random.PCG64(seed)
    chosen = np.zeros(0, np.int64)
    while chosen.size < m:
        draw = bits.random_raw(m - chosen.size) % np.uint64(numel)
        chosen = np.union1d(chosen, draw.astype(np.int64))
    if m == k:
        return chosen
    keep = np.ones(numel, bool)
    keep[chosen] = False
    return np.flatnonzero(keep)


@register
class RandomK(Codec):
    name = "randomk"
    codec_id = 9
    lossy = True
    params_struct = struct.Struct("<QQ")  # index seed, k

    def __init__(self, ratio: float = 0.01, seed: int | np.random.Generator | None = 0, **kw) -> None:
        super().__init__(**kw)
        self.ratio = topk.check_ratio(ratio)
        self.rng = np.random.default_rng(seed)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        k = topk.num_kept(vec.size, self.ratio)
        seed = int(self.rng.integers(2**64, dtype=np.uint64))
        return (seed, k), [vec[positions(seed, vec.size, k)]]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        seed, k = params
        if k > numel:
            raise CodecError(f"{self.name}: {k} kept values for only {numel} elements")
        if len(payload) != 4 * k:
            raise CodecError(f"{self.name}: payload {len(payload)} bytes, {k} float32 values need {4 * k}")
        out = np.zeros(numel, np.float32)
        out[positions(seed, numel, k)] = np.frombuffer(payload, "<f4")
        return out

    def payload_size(self, numel: int) -> int:
        return 4 * topk.num_kept(numel, self.ratio)
