"""The check every fuzz test of a decoder makes: whatever the bytes, decoding gives a sane vector or
raises CodecError, never another exception, and never allocates much more than its cap."""
from __future__ import annotations

import tracemalloc

import numpy as np

from commlab.codecs import CodecError, decode_any

CAP = 1 << 16  # decoders in these tests may produce at most 256 KiB


def decode_only_codec_error(frame) -> None:
    """Decoding either succeeds with a sane vector or raises CodecError; allocations stay small."""
    tracemalloc.start()
    try:
        out = decode_any(frame, max_numel=CAP)
    except CodecError:
        out = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 64 * CAP + 64 * len(frame) + (1 << 20), f"peak allocation {peak} bytes"
    if out is not None:
        assert out.dtype == np.float32 and out.ndim == 1 and out.size <= CAP
