"""What q bits mean for an update: qsgd's levels s = 2^q - 1, the frame sizes at each bits (exact
for qsgd, estimated from the update for the entropy-coded qsgdz) and QSGD's variance bound."""
from __future__ import annotations

import functools
import math

import numpy as np

from commlab.codecs import CodecError, get_codec, wire
from commlab.codecs.base import codec_class

BITS = tuple(range(1, 9))


def levels(bits: int) -> int:
    """qsgd levels s for q bits: s = 2^q - 1, the largest level that fits q bits."""
    return 2 ** bits - 1


def takes_bits(codec: str) -> bool:
    """Whether the allocation can set the bits of codec `codec`: it takes qsgd's `levels`."""
    try:
        return codec_class(codec)[0].takes("levels")
    except CodecError:
        return False


@functools.lru_cache(maxsize=256)
def payload_bytes(bits: int, numel: int, bucket: int = 512, family: str = "qsgd") -> int:
    """Wire frame bytes of one update of `numel` values at `bits` with the codec `family` ("qsgd",
    "qsgdz": its codec's family) at levels(bits) (codec wire_size): exact for qsgd, a bound for
    qsgdz: its dense layout, qsgd's payload."""
    return get_codec(family, levels=levels(bits), bucket=bucket).wire_size(numel)


def frame_size_estimates(update: np.ndarray, family: str, bits: int, frame_len: int, bucket: int = 512,
                         sample_every: int = 16) -> dict[int, int]:
    """Frame bytes of `update` at every bits, for entropy-coded frames whose size depends on the
    data: every `sample_every`-th bucket encoded at each bits (about 40 ms for an MNIST CNN
    update), scaled to the whole vector, then calibrated so that `bits` gives `frame_len`, the
    frame actually sent."""
    whole = update.size // bucket
    sample = (update[: whole * bucket].reshape(whole, bucket)[::sample_every].ravel()
              if whole >= 2 * sample_every else update)
    scale = update.size / max(sample.size, 1)
    raw = {}
    for q in BITS:
        codec = get_codec(family, levels=levels(q), bucket=bucket, seed=0)
        head = wire.overhead(codec.params_struct.size)
        raw[q] = head + (len(codec.encode(sample)) - head) * scale
    calibration = frame_len / raw[bits]
    return {q: max(1, round(v * calibration)) for q, v in raw.items()} | {bits: frame_len}


def check_size_estimates(sizes: object, numel: int, bucket: int, family: str) -> dict[int, int] | str:
    """A client's reported frame sizes ({"1": bytes, ..., "8": bytes} on the wire) as {bits: bytes},
    or why they are unusable: every bits present, integers within the codec's bound."""
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(str(q) for q in BITS):
        return f"frame sizes must name every bits 1..8, got {str(sizes)[:80]}"
    out = {}
    for q in BITS:
        v, bound = sizes[str(q)], payload_bytes(q, numel, bucket, family)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= bound:
            return f"frame size at {q} bits must be an integer in 1..{bound} bytes, got {v!r}"
        out[q] = v
    return out


def variance_factor(bits: int, dim: int = 512) -> float:
    """QSGD's bound E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2, d = the bucket size."""
    s = levels(bits)
    return min(dim / s ** 2, math.sqrt(dim) / s)
