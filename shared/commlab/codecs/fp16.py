"""fp16: IEEE half precision, rounded to nearest (ties to even), as torch's fp16_compress_hook.

Half the bytes of fp32. The error is at most 2**-11 of |x| in fp16's normal range (|x| >= 2**-14)
and at most 2**-25 below it (subnormals); values that round beyond 65504 have no fp16 and are
refused. The sum of the ranks' fp16 gradients is what torch's hook allreduces, so in DDP fp16
values are summed in transit (exchange ALLREDUCE): ring partial sums travel as fp16 frames and are
added in float32. Summed in transit, no rank sees its own frame come back, so fp16 keeps no
error-feedback memory (Codec.build's rule), in FL neither: the rounding is far below an
update's own noise.

Wire: no parameters; the payload is the numel values as little-endian binary16. The decoder
rejects a wrong payload length and any Inf or NaN.

Both directions work on the bits of whole arrays, as bf16.py does: numpy's float16 casts convert
element by element and take a slow path for subnormals, which small updates and gradients are
full of. The tests compare both directions with torch's conversions.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.base import register
from commlab.codecs.float_words import HalfWords

FP16_MAX = float(np.finfo(np.float16).max)
_EXPONENT = np.uint16(0x7C00)  # all ones: Inf or NaN
_MIN_NORMAL = np.uint32(113 << 23)  # |x| below 2**-14 (these float32 bits) is an fp16 subnormal
_TOO_BIG = np.uint32(143 << 23)     # |x| from 2**16 on has no fp16
_REBIAS = np.uint32((1 << 32) - (112 << 23))  # minus the exponent bias difference, 127 - 15, mod 2**32
_HALF = np.float32(0.5)  # adding it rounds |x| < 2**-14 to a multiple of 2**-24, fp16's subnormal step
_SCALE = np.float32(2.0**112)  # 2**(127 - 15): fp16 bits moved into float32's place, times this


def to_fp16(vec: np.ndarray) -> np.ndarray:
    """float32 -> binary16 words (uint16), rounded to nearest, ties to even; a value without a
    finite fp16 (NaN, Inf, |x| rounding beyond 65504) becomes Inf's exponent pattern."""
    bits = vec.view(np.uint32)
    mag = bits & np.uint32(0x7FFFFFFF)
    normal = (mag + _REBIAS + np.uint32(0xFFF) + ((mag >> 13) & np.uint32(1))) >> 13
    tiny = (mag.view(np.float32) + _HALF).view(np.uint32) - _HALF.view(np.uint32)
    words = np.where(mag < _MIN_NORMAL, tiny, np.minimum(normal, np.uint32(0x7C00)))
    words[mag >= _TOO_BIG] = 0x7C00
    words |= (bits >> 16) & np.uint32(0x8000)
    return words.astype("<u2")


def from_fp16(words: np.ndarray) -> np.ndarray:
    """binary16 words without Inf or NaN -> float32, exactly."""
    out = (words & np.uint16(0x7FFF)).astype(np.uint32) << 13
    out.view(np.float32)[:] *= _SCALE
    out |= (words & np.uint16(0x8000)).astype(np.uint32) << 16
    return out.view(np.float32)


@register
class Fp16(HalfWords):
    name = "fp16"
    codec_id = 13
    exponent = _EXPONENT
    unrepresentable = f"values must be finite and round to a magnitude <= {FP16_MAX:g}"

    def _narrow(self, vec: np.ndarray) -> np.ndarray:
        return to_fp16(vec)

    def _widen(self, words: np.ndarray) -> np.ndarray:
        return from_fp16(words)
