"""Uniform random draws for the stochastic codecs (qsgd, terngrad): float32 on [0, 1) with 24
random bits each, the grid of numpy's ``Generator.random(dtype=np.float32)``, so the quantizers
keep their distributions.

The bits come from AES-128 in counter mode (the `cryptography` package, OpenSSL's AES-NI code)
under a fresh 128-bit key that each frame draws from the codec's own numpy Generator: the codec's
state stays that Generator (seeded, checkpointed, restored as before), and a frame costs it two
draws instead of one per value. numpy's generators took longer than all the rest of a codec's
encode (make bench-codecs); the AES keystream costs about what a memcpy of the bytes does.
"""
from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from commlab.codecs import scratch
from commlab.codecs.jit import kernel

_BLOCK = 16  # AES block bytes: update_into may write up to one block beyond its input
_NONCE = bytes(16)  # every key encrypts one stream only
_zeros = np.zeros(0, np.uint8)  # the plaintext: calloc'd zero pages, never written


def keystream(key: bytes, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
    """The first ``nbytes`` bytes (uint8) of the AES-128-CTR keystream of a 16-byte ``key``, in
    ``out`` (uint8, at least nbytes + 16 long) when given."""
    global _zeros
    if _zeros.size < nbytes:
        _zeros = np.zeros(max(nbytes, 2 * _zeros.size), np.uint8)
    if out is None:
        out = np.empty(nbytes + _BLOCK, np.uint8)
    encryptor = Cipher(algorithms.AES(key), modes.CTR(_NONCE)).encryptor()
    encryptor.update_into(memoryview(_zeros)[:nbytes], out)
    return out[:nbytes]


def words(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random uint32 words under a fresh key from ``rng``: what ``uniforms`` turns into floats, for
    the compiled loops that turn them themselves (``uniform``). A scratch array (scratch.py): valid
    until this thread's next call."""
    return keystream(rng.bytes(16), 4 * n, scratch.buffer("draws.bits", 4 * n + _BLOCK, np.uint8)).view("<u4")


@kernel(inline="always")
def uniform(word: np.uint32) -> np.float32:
    """One word's uniform, as ``uniforms`` makes it."""
    return np.float32(word >> np.uint32(8)) * np.float32(2.0**-24)


def uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """n float32 uniforms on [0, 1): (32 random bits >> 8) * 2**-24, as numpy's float32 draws.
    A scratch array (scratch.py): valid until this thread's next call."""
    bits = words(rng, n)
    np.right_shift(bits, np.uint32(8), out=bits)
    out = scratch.buffer("draws.uniforms", n, np.float32)
    np.copyto(out, bits.view(np.int32), casting="unsafe")  # below 2**24: exact; int32 converts vectorised
    out *= np.float32(2.0**-24)
    return out
