"""qsgd<s>: stochastic quantization with s levels (Alistarh et al., 2017), unbiased.
Level l_i = floor(s |w_i| / ||w|| + u_i), u_i ~ U[0, 1); decode ||w|| * sign_i * l_i / s.
Sent as the float32 norm, a sign bitmap and the levels bit-packed in ceil(log2(s+1)) bits."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs import bitpack
from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError

_NORM = struct.Struct("<f")


def _bits(levels: int) -> int:
    return int(levels).bit_length()


@register
class QSGD(Codec):
    name = "qsgd"
    codec_id = 6
    lossy = True
    params_struct = struct.Struct("<B")  # levels
    suffix_param = "levels"

    def __init__(self, levels: int = 16, seed: int | np.random.Generator | None = None, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(levels, int) or not 1 <= levels <= 255:
            raise CodecError(f"qsgd levels must be an integer in 1..255, got {levels!r}")
        self.levels = levels
        self.name = f"qsgd{levels}"
        self.rng = np.random.default_rng(seed)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        # float64 accumulation (buffered by einsum, no float64 copy of the vector).
        norm64 = float(np.sqrt(np.einsum("i,i->", vec, vec, dtype=np.float64)))
        if not norm64 <= MAX_MAGNITUDE:
            raise CodecError(f"{self.name}: values must be finite with norm <= {MAX_MAGNITUDE:g}")
        norm = np.float32(norm64)
        t = np.abs(vec)
        if norm > 0:  # divide first: levels / norm overflows float32 for tiny norms
            t /= norm
            t *= np.float32(self.levels)
        t += self.rng.random(vec.size, dtype=np.float32)
        np.floor(t, out=t)
        # Rounding of the float32 norm can push |w|/norm a hair above 1.
        np.minimum(t, self.levels, out=t)
        q = t.astype(np.uint8)
        signs = np.packbits((vec < 0) & (q > 0), bitorder="little")
        return (self.levels,), [_NORM.pack(norm), signs, bitpack.pack(q, _bits(self.levels))]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        (levels,) = params
        if levels == 0:
            raise CodecError("qsgd: 0 levels in frame")
        sign_len = -(-numel // 8)
        expected = _NORM.size + sign_len + bitpack.packed_size(numel, _bits(levels))
        if len(payload) != expected:
            raise CodecError(f"qsgd: payload {len(payload)} bytes, {numel} at {levels} levels need {expected}")
        (norm,) = _NORM.unpack_from(payload)
        if not 0 <= norm <= MAX_MAGNITUDE:
            raise CodecError(f"qsgd: norm {norm} must be finite, non-negative and <= {MAX_MAGNITUDE:g}")
        sign_bits = np.unpackbits(np.frombuffer(payload, np.uint8, sign_len, _NORM.size), bitorder="little")
        if sign_bits[numel:].any():
            raise CodecError("qsgd: sign bitmap has bits set past the end of the vector")
        packed = np.frombuffer(payload, np.uint8, offset=_NORM.size + sign_len)
        q = bitpack.unpack(packed, numel, _bits(levels))
        if numel and q.max() > levels:
            raise CodecError(f"qsgd: level {q.max()} exceeds the {levels} levels in the header")
        out = q.astype(np.float32)
        out *= np.float32(norm / levels)
        np.negative(out, out=out, where=sign_bits[:numel].astype(bool))
        return out

    def payload_size(self, numel: int) -> int:
        return _NORM.size + -(-numel // 8) + bitpack.packed_size(numel, _bits(self.levels))
