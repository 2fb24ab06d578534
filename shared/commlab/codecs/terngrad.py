"""terngrad: stochastic ternarization of TernGrad (Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad:
Ternary Gradients to Reduce Communication in Distributed Deep Learning", NeurIPS 2017), with the
paper's layer-wise scaling done per block of ``block`` consecutive values (default 1024; the
codec does not know the layers) and without its gradient clipping (so it stays unbiased).

With s_b = max|g| over the block of value i, value i becomes s_b * sign(g_i) * b_i,
b_i ~ Bernoulli(|g_i| / s_b), so the decoded vector is unbiased: E[decode(encode(g))] = g (up to
the 2**-24 grid of the float32 uniforms). One s for the whole flat model vector makes b_i tiny
for every layer but the one holding the largest value: its variance is s |g_i| per value
(measured: FL -37 pp); per block it is bounded by the block's own max. On FL round deltas of the
MNIST CNN, E||Q(g) - g||^2 / ||g||^2 is 11-32 with one scale, 3.6 (block 4096), 2.6 (1024), 1.8
(256), 1.2 (64); at 1024 (scales: 1/32 bit per value) FL and DDP are within 0.35 pp of fp32.
Clipping at 2.5 sigma per block would cut that error to about 0.6, but biases the codec (6-13 %
of the energy) and was not needed.

Over the wire: the parameters carry the block size (uint32); the payload is one float32 s_b per
block, then two bitmaps of ceil(D/8) bytes each (bit order as in signsgd.py): b (the non-zero
values) and the signs of the non-zero values (a sign bit on a zero value is rejected, so every
vector has one encoding): 4 ceil(D/B) + 2 ceil(D/8) bytes.

The codec keeps its own numpy Generator (``seed``, default 0; a node's is its codec seed, commlab.runs.seeds): successive encodes draw fresh
Bernoulli variables (b_i = u_i < |g_i| / s_b, with the uniforms of draws.py: a key per frame from
the Generator), and two codecs built with the same seed give the same frames for the same inputs
in the same order.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs import draws, scratch
from commlab.codecs.base import MAX_MAGNITUDE, RandomCodec, register
from commlab.codecs.bitmaps import bitmap, bitmap_size, read_bitmap, signed_scales
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.signsgd import BLOCK, check_block, num_blocks, read_scales


@kernel
def _ternarize(vec: np.ndarray, block: int, key: np.ndarray, s: np.ndarray, nonzero: np.ndarray,
               negative: np.ndarray) -> None:
    """Per block, while it is in cache: s_b = max |g| (an integer max of the magnitude bits:
    vectorised, and NaN comes out above inf), then per value b = u < |g| / s_b (an all-zero block
    divides by 1) and its sign, as 0/1 bytes. One loop over each block's own views."""
    keys, s_bits = vec.view(np.uint32), s.view(np.uint32)
    for c in range(s.size):
        start = c * block
        span = slice(start, start + block)
        x, k, nz, neg = vec[span], keys[span], nonzero[span], negative[span]
        top = np.uint32(0)
        for i in range(k.size):  # numpy's scalar ufuncs: 32-bit operations, which vectorise
            top = np.maximum(top, np.bitwise_and(k[i], np.uint32(0x7FFFFFFF)))
        s_bits[c] = top
        divisor = s[c] if s[c] > 0 else np.float32(1)
        for i in range(x.size):
            kept = draws.uniform(key, start + i) < abs(x[i]) / divisor
            nz[i] = kept
            neg[i] = kept & (x[i] < 0)


@register
class TernGrad(RandomCodec):
    name = "terngrad"
    codec_id = 8
    lossy = True
    unbiased = True
    params_struct = BLOCK

    def __init__(self, block: int = 1024, seed: int | np.random.Generator | None = 0, **kw) -> None:
        super().__init__(**kw)
        self.block = check_block(block, self.name)
        self.rng = np.random.default_rng(seed)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        # |g| <= s_b, so the float32 quotient |g| / s_b is <= 1 (no overflow even if s_b is subnormal).
        s = np.empty(num_blocks(vec.size, self.block), np.float32)
        nonzero = scratch.buffer("terngrad.nonzero", vec.size, np.bool_)
        negative = scratch.buffer("terngrad.negative", vec.size, np.bool_)
        _ternarize(vec, self.block, draws.frame_key(self.rng), s, nonzero, negative)
        if not (s <= MAX_MAGNITUDE).all():  # NaN fails too
            raise CodecError(f"{self.name}: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
        return (self.block,), [s, bitmap(nonzero), bitmap(negative)]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        block = check_block(params[0], self.name)
        nblocks = num_blocks(numel, block)
        expected = 4 * nblocks + 2 * bitmap_size(numel)
        if len(payload) != expected:
            raise CodecError(f"{self.name}: payload {len(payload)} bytes, {numel} values in blocks of {block} "
                             f"need {expected}")
        s = read_scales(payload, nblocks, self.name)
        nonzero = read_bitmap(payload, 4 * nblocks, numel, self.name)
        negative = read_bitmap(payload, 4 * nblocks + bitmap_size(numel), numel, self.name)
        if (negative & ~nonzero).any():
            raise CodecError(f"{self.name}: sign bit set on a zero value")
        return signed_scales(negative, s, block, numel, nonzero)

    def payload_size(self, numel: int) -> int:
        return 4 * num_blocks(numel, self.block) + 2 * bitmap_size(numel)
