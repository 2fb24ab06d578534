"""Work arrays the codecs reuse from one frame to the next. A fresh array of tens of MB costs the
kernel's page faults and zeroing on first touch, about as much as a pass over it, and an encode
makes several temporaries. Each thread keeps one array per name, at the largest size asked for."""
from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def buffer(name: str, size: int, dtype: np.dtype | type) -> np.ndarray:
    """A work array of ``size`` elements of ``dtype``, contents undefined. The next call with the
    same name in this thread returns the same memory: only for temporaries that are dead by then
    (nothing a codec returns, except through the frame it joins)."""
    pool = _local.__dict__.setdefault("pool", {})
    nbytes = size * np.dtype(dtype).itemsize
    raw = pool.get(name)
    if raw is None or raw.size < nbytes:
        raw = pool[name] = np.empty(nbytes, np.uint8)
    return raw[:nbytes].view(dtype)
