"""bf16: bfloat16, the upper 16 bits of float32 rounded to nearest (ties to even), as torch's
bf16_compress_hook.

Half the bytes of fp32 with float32's range: 8 significant bits, so the error is at most 2**-8 of
|x| (2**-134 among float32's subnormals); values that round beyond float32's range (above about
3.39e38) are refused. numpy has no bfloat16: encoding adds 0x7FFF plus the lowest kept bit to the
float32 bits and keeps the upper half, decoding shifts them back. As fp16, bf16 values are summed
in transit in DDP (exchange ALLREDUCE) and bf16 keeps no memory (Codec.build's rule).

Wire: no parameters; the payload is the numel values as little-endian 16-bit words. The decoder
rejects a wrong payload length and any Inf or NaN.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.base import register
from commlab.codecs.errors import CodecError
from commlab.codecs.float_words import HalfWords

_EXPONENT = np.uint16(0x7F80)  # all ones: Inf or NaN
_EXPONENT32 = np.uint32(0x7F800000)


def to_bf16(vec: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 words (uint16), rounded to nearest, ties to even; finite input only
    (NaN's bits may wrap round)."""
    bits = vec.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))
    return (rounded >> 16).astype("<u2")


def from_bf16(words: np.ndarray) -> np.ndarray:
    """bfloat16 words -> float32, exactly."""
    return (words.astype(np.uint32) << 16).view(np.float32)


@register
class Bf16(HalfWords):
    name = "bf16"
    codec_id = 14
    exponent = _EXPONENT
    unrepresentable = "values must round to a finite bfloat16 (magnitude below about 3.39e38)"

    def _narrow(self, vec: np.ndarray) -> np.ndarray:
        if ((vec.view(np.uint32) & _EXPONENT32) == _EXPONENT32).any():  # NaN's bits may wrap round
            raise CodecError("bf16: values must be finite")
        return to_bf16(vec)

    def _widen(self, words: np.ndarray) -> np.ndarray:
        return from_bf16(words)
