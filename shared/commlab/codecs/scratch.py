"""Work arrays the codecs reuse from one frame to the next, and the process's allocator policy.
A fresh array of tens of MB costs the kernel's page faults and zeroing on first touch, about as
much as a pass over it (far more in a virtual machine, where each first touch of a 4 KiB page
exits to the host), and an encode makes several temporaries. Each thread keeps one array per name,
at the largest size asked for."""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

_local = threading.local()
_pooling = True  # buffer() keeps its arrays (pool_buffers)

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_FREED = 2**31 - 1  # bytes free at the top of the heap before glibc returns any: never, in practice


def buffer(name: str, size: int, dtype: np.dtype | type) -> np.ndarray:
    """A work array of ``size`` elements of ``dtype``, contents undefined. The next call with the
    same name in this thread returns the same memory (unless pool_buffers turned that off): only
    for temporaries that are dead by then (nothing a codec returns, except through the frame it joins)."""
    nbytes = size * np.dtype(dtype).itemsize
    if not _pooling:
        return np.empty(nbytes, np.uint8).view(dtype)
    pool = _local.__dict__.setdefault("pool", {})
    raw = pool.get(name)
    if raw is None or raw.size < nbytes:
        raw = pool[name] = np.empty(nbytes, np.uint8)
    return raw[:nbytes].view(dtype)


def pool_buffers(enabled: bool) -> None:
    """Whether buffer() keeps its arrays for the next call (the default), or returns a fresh one
    each time, freed with its last use. For a process that encodes once in a long while (an FL
    node, once a round) a kept array buys nothing, and a fresh one lives only as long as the step
    that uses it, not the whole encode: top-k's candidates are gone before the frame is built."""
    global _pooling
    _pooling = enabled
    if not enabled:
        release_buffers()


def release_buffers() -> None:
    """Drop this thread's work arrays. For a process that encodes once in a long while (an FL
    node, once a round), whose arrays would otherwise stay resident between frames: top-k's candidates (positions and
    keys) are sized for every value, twice the vector's size, resident as far as they filled."""
    _local.__dict__.pop("pool", None)


def retain_freed_memory() -> bool:
    """Make glibc's malloc keep the memory a process frees for its next allocations: every block
    from its heap (no mmap per large block, which free returns to the kernel) and no trimming of
    the heap's top. Frames and decoded vectors are fresh objects of the same sizes frame after
    frame; with the default policy each one above 32 MB is a new mapping whose every page faults
    in on first touch (for a 10M-value vector that took longer than the codec itself). The cost:
    the process's resident memory stays at its peak. Returns whether the policy applied (False
    where the C library is not glibc). DDP workers and the codec benchmark call it at start (FL
    nodes do not: fl.entry)."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED))


def release_freed_memory() -> bool:
    """Hand the memory this process freed back to the kernel at once (glibc's malloc_trim): after
    a burst that retain_freed_memory would keep resident for good, such as training's activations,
    many times the size of any frame. Returns whether it applied (False: not glibc, or nothing to free)."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (musl's mallopt does nothing, and it has no malloc_trim):
    the symbols the process already has loaded."""
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "gnu_get_libc_version") else None
