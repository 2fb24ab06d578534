"""signsgd: scaled sign compression of EF-signSGD (Karimireddy, Rebjock, Stich, Jaggi, "Error
Feedback Fixes SignSGD and other Gradient Compression Schemes", ICML 2019).

Over the wire: one float32 scale s = ||p||_1 / D (the mean magnitude), then the signs as a bitmap
of ceil(D/8) bytes, bit i (little-endian bit order) set when p_i < 0. Decode: s * sign(p_i), where
zero (and -0.0) maps to +1, so every decoded value is +s or -s. The codec is stateless: the error
feedback of EF-signSGD is the separate ``ErrorFeedback`` memory (memory.py) around it.

The 1-bit stream has the layout of ``bitpack.pack(values, 1)``, but is built with np.packbits,
about 90 times faster. The bitmap and scale helpers are shared with terngrad.py.
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import MAX_MAGNITUDE, Codec, register
from commlab.codecs.errors import CodecError

SCALE = struct.Struct("<f")


def bitmap(mask: np.ndarray) -> np.ndarray:
    """Boolean vector -> ceil(D/8) bytes, bit i of the stream is mask[i]."""
    return np.packbits(mask, bitorder="little")


def bitmap_size(numel: int) -> int:
    return -(-numel // 8)


def read_bitmap(payload: memoryview, offset: int, numel: int, what: str) -> np.ndarray:
    """The bits (uint8 0/1) of the bitmap at ``offset``; the caller checked the payload length."""
    bits = np.unpackbits(np.frombuffer(payload, np.uint8, bitmap_size(numel), offset), bitorder="little")
    if bits[numel:].any():
        raise CodecError(f"{what}: bitmap has bits set past the end of the vector")
    return bits[:numel]


def read_scale(payload: memoryview, what: str) -> float:
    (scale,) = SCALE.unpack_from(payload)
    if not 0 <= scale <= MAX_MAGNITUDE:
        raise CodecError(f"{what}: scale {scale} must be finite, non-negative and <= {MAX_MAGNITUDE:g}")
    return scale


@register
class SignSGD(Codec):
    name = "signsgd"
    codec_id = 7
    lossy = True
    params_struct = struct.Struct("<")

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        # float64 accumulation: the float32 sum of a large vector overflows or loses precision.
        mean = float(np.abs(vec).sum(dtype=np.float64)) / vec.size if vec.size else 0.0
        if not mean <= MAX_MAGNITUDE:
            raise CodecError(f"{self.name}: values must be finite with mean magnitude <= {MAX_MAGNITUDE:g}")
        return (), [SCALE.pack(mean), bitmap(vec < 0)]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        if len(payload) != self.payload_size(numel):
            raise CodecError(
                f"{self.name}: payload {len(payload)} bytes, {numel} signs need {self.payload_size(numel)}"
            )
        scale = read_scale(payload, self.name)
        # A table lookup: far faster than a masked negative on a random sign pattern.
        return np.array([scale, -scale], np.float32).take(read_bitmap(payload, SCALE.size, numel, self.name))

    def payload_size(self, numel: int) -> int:
        return SCALE.size + bitmap_size(numel)
