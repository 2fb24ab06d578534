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
"""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import ALLREDUCE, Codec, register
from commlab.codecs.errors import CodecError

FP16_MAX = float(np.finfo(np.float16).max)
_EXPONENT = np.uint16(0x7C00)  # all ones: Inf or NaN


@register
class Fp16(Codec):
    name = "fp16"
    codec_id = 13
    lossy = True
    params_struct = struct.Struct("<")
    exchange = ALLREDUCE

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        with np.errstate(over="ignore", invalid="ignore"):
            half = vec.astype("<f2")
        if ((half.view(np.uint16) & _EXPONENT) == _EXPONENT).any():
            raise CodecError(f"fp16: values must be finite and round to a magnitude <= {FP16_MAX:g}")
        return (), [half]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        if len(payload) != 2 * numel:
            raise CodecError(f"fp16: payload {len(payload)} bytes, {numel} elements need {2 * numel}")
        bits = np.frombuffer(payload, "<u2")
        if ((bits & _EXPONENT) == _EXPONENT).any():
            raise CodecError("fp16: frame holds Inf or NaN")
        return bits.view("<f2").astype(np.float32)

    def payload_size(self, numel: int) -> int:
        return 2 * numel
