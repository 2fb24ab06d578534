"""fp32: the raw little-endian float32 vector; the dense reference every other codec is compared with.
In DDP it is the allreduce reference ("dense"), as torch's allreduce_hook."""
from __future__ import annotations

import numpy as np

from commlab.codecs.base import register
from commlab.codecs.float_words import FloatWords


@register
class Fp32(FloatWords):
    name = "fp32"
    codec_id = 1
    lossy = False
    aliases = ("dense",)
    width = 4

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        return (), [vec]

    def _values(self, payload: memoryview) -> np.ndarray:
        return np.frombuffer(payload, dtype="<f4").astype(np.float32)
