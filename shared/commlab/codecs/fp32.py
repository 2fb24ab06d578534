"""fp32: the raw little-endian float32 vector; the dense reference every other codec is compared with.
In DDP it is the allreduce reference ("dense"), as torch's allreduce_hook."""
from __future__ import annotations

import struct

import numpy as np

from commlab.codecs.base import ALLREDUCE, Codec, register
from commlab.codecs.errors import CodecError


@register
class Fp32(Codec):
    name = "fp32"
    codec_id = 1
    lossy = False
    params_struct = struct.Struct("<")
    aliases = ("dense",)
    exchange = ALLREDUCE

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        return (), [vec]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        if len(payload) != 4 * numel:
            raise CodecError(f"fp32: payload {len(payload)} bytes, {numel} elements need {4 * numel}")
        return np.frombuffer(payload, dtype="<f4").astype(np.float32)

    def payload_size(self, numel: int) -> int:
        return 4 * numel
