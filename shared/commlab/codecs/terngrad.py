"""terngrad: stochastic ternarization of TernGrad (Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad:
Ternary Gradients to Reduce Communication in Distributed Deep Learning", NeurIPS 2017), without
the paper's optional layer-wise scaling and gradient clipping.

With s = max|g|, value i becomes s * sign(g_i) * b_i, b_i ~ Bernoulli(|g_i| / s), so the decoded
vector is unbiased: E[decode(encode(g))] = g (up to the 2**-24 grid of the float32 uniforms).
Over the wire, 2 bits per value: the float32 s, then two bitmaps of ceil(D/8) bytes each (bit
order as in signsgd.py): b (the non-zero values) and the signs of the non-zero values (a sign bit
on a zero value is rejected, so every vector has one encoding).

The codec keeps its own numpy Generator (``seed``, default 0): successive encodes draw fresh
Bernoulli variables, and two codecs built with the same seed give the same frames for the same
inputs in the same order.
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError
from commlab.codecs.signsgd import SCALE, bitmap, bitmap_size, read_bitmap, read_scale


@register
class TernGrad(Codec):
    name = "terngrad"
    codec_id = 8
    lossy = True
    unbiased = True
    params_struct = struct.Struct("<")

    def __init__(self, seed: int | np.random.Generator | None = 0, **kw) -> None:
        super().__init__(**kw)
        self.rng = np.random.default_rng(seed)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        s = max(float(vec.max()), -float(vec.min())) if vec.size else 0.0
        if not s <= MAX_MAGNITUDE:
            raise CodecError(f"{self.name}: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
        p = np.abs(vec)
        if s > 0:
            p /= np.float32(s)  # |g| <= s, so the float32 quotient is <= 1 (no overflow even if s is subnormal)
        nonzero = self.rng.random(vec.size, dtype=np.float32) < p
        return (), [SCALE.pack(s), bitmap(nonzero), bitmap(nonzero & (vec < 0))]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        if len(payload) != self.payload_size(numel):
            raise CodecError(
                f"{self.name}: payload {len(payload)} bytes, {numel} values need {self.payload_size(numel)}"
            )
        s = read_scale(payload, self.name)
        nonzero = read_bitmap(payload, SCALE.size, numel, self.name)
        negative = read_bitmap(payload, SCALE.size + bitmap_size(numel), numel, self.name)
        code = nonzero | negative << 1  # 0: zero, 1: +s, 3: -s
        if (code == 2).any():
            raise CodecError(f"{self.name}: sign bit set on a zero value")
        return np.array([0, s, 0, -s], np.float32).take(code)

    def payload_size(self, numel: int) -> int:
        return SCALE.size + 2 * bitmap_size(numel)
