"""minmax<n>: global min-max quantization to n = 1..8 bits, bit-packed.
scale = (max - min) / (2**n - 1), q = round((w - min) / scale), decode min + q * scale."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import bitpack
from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError

_HEAD = struct.Struct("<ff")  # min, scale


@register
class MinMax(Codec):
    name = "minmax"
    codec_id = 5
    lossy = True
    params_struct = struct.Struct("<B")  # bits
    suffix_param = "bits"

    def __init__(self, bits: int = 8, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(bits, int) or not 1 <= bits <= 8:
            raise CodecError(f"minmax bits must be an integer in 1..8, got {bits!r}")
        self.bits = bits
        self.name = f"minmax{bits}"

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        lo = float(vec.min()) if vec.size else 0.0
        hi = float(vec.max()) if vec.size else 0.0
        if not max(abs(lo), abs(hi)) <= MAX_MAGNITUDE:
            raise CodecError(f"{self.name}: values must be finite with magnitude <= {MAX_MAGNITUDE:g}")
        scale = np.float32((hi - lo) / ((1 << self.bits) - 1))
        t = np.subtract(vec, np.float32(lo))
        if scale >= np.finfo(np.float32).tiny:
            t *= np.float32(1 / scale)
        elif scale > 0:  # subnormal scale: its reciprocal overflows float32, so divide
            t /= scale
        else:
            t[:] = 0
        np.rint(t, out=t)
        np.clip(t, 0, (1 << self.bits) - 1, out=t)
        q = t.astype(np.uint8)
        return (self.bits,), [_HEAD.pack(lo, scale), bitpack.pack(q, self.bits)]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        (bits,) = params
        if not 1 <= bits <= 8:
            raise CodecError(f"minmax: {bits} bits in frame, must be 1..8")
        if len(payload) != _HEAD.size + bitpack.packed_size(numel, bits):
            raise CodecError(f"minmax: payload {len(payload)} bytes, {numel} values of {bits} bits need "
                             f"{_HEAD.size + bitpack.packed_size(numel, bits)}")
        lo, scale = _HEAD.unpack_from(payload)
        if not (abs(lo) <= MAX_MAGNITUDE and 0 <= scale * ((1 << bits) - 1) <= 2 * MAX_MAGNITUDE):
            raise CodecError(f"minmax: min {lo} / scale {scale} non-finite, negative or overflowing float32")
        q = bitpack.unpack(np.frombuffer(payload, np.uint8, offset=_HEAD.size), numel, bits)
        out = q.astype(np.float32)
        out *= np.float32(scale)
        out += np.float32(lo)
        return out

    def payload_size(self, numel: int) -> int:
        return _HEAD.size + bitpack.packed_size(numel, self.bits)
