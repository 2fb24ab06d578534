"""Random draws of the codecs: the uniforms of the stochastic quantizers (qsgd, terngrad) and the
keystream randomk builds its index set from.

Uniforms: float32 on [0, 1) with 24 random bits each, the grid of numpy's
``Generator.random(dtype=np.float32)``, so the quantizers keep their distributions. They come from
a counter-based generator that the quantizing loops compute themselves, value by value, so no
stream of random words is written and read back. Each frame draws a 64-bit key (k0, k1) from the
codec's own numpy Generator (seeded, checkpointed and restored as before: the codec's state stays
that Generator, and a frame costs it one draw). Value i of the frame takes the word

    h = mix32((k0 + i * 0x9E3779B9) xor k1)      (uint32 arithmetic, modulo 2**32)
    u = (h >> 8) * 2**-24

where the counter walks a Weyl sequence (the golden-ratio step of SplitMix) and mix32 is the
avalanche finaliser ``lowbias32`` (x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B;
x ^= x >> 16), a bijection of 32-bit words. Within a frame of up to 2**32 values the words are
distinct; k1 makes frames' streams different sequences, not shifts of one another. Only the encoder
needs the uniforms (the frame carries the levels), so the generator is no part of the wire format.
Every operation is a 32-bit integer one: numpy's scalar ufuncs keep numba from widening them to 64
bits, and the loops vectorise.

Keystream: AES-128 in counter mode (the `cryptography` package, OpenSSL's AES-NI code), the bytes
randomk's sender and receiver both derive from a frame's seed.
"""
from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from commlab.codecs.jit import kernel

_BLOCK = 16  # AES block bytes: update_into may write up to one block beyond its input
_NONCE = bytes(16)  # every key encrypts one stream only
_zeros = np.zeros(0, np.uint8)  # the plaintext: calloc'd zero pages, never written

_GAMMA = np.uint32(0x9E3779B9)
_MIX1, _MIX2 = np.uint32(0x7FEB352D), np.uint32(0x846CA68B)
_S8, _S15, _S16 = np.uint32(8), np.uint32(15), np.uint32(16)
_GRID = np.float32(2.0**-24)


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


def frame_key(rng: np.random.Generator) -> np.ndarray:
    """A frame's key (k0, k1): two uint32 words, one draw of the codec's Generator."""
    return rng.integers(0, 2**32, size=2, dtype=np.uint32)


@kernel(inline="always")
def word(key: np.ndarray, i: int) -> np.uint32:
    """The generator's word for value ``i`` of the frame keyed ``key`` (see above)."""
    x = np.bitwise_xor(np.add(key[0], np.multiply(np.uint32(i), _GAMMA)), key[1])
    x = np.multiply(np.bitwise_xor(x, np.right_shift(x, _S16)), _MIX1)
    x = np.multiply(np.bitwise_xor(x, np.right_shift(x, _S15)), _MIX2)
    return np.bitwise_xor(x, np.right_shift(x, _S16))


@kernel(inline="always")
def uniform(key: np.ndarray, i: int) -> np.float32:
    """Value i's uniform: the top 24 bits of its word, times 2**-24."""
    return np.float32(np.int32(np.right_shift(word(key, i), _S8))) * _GRID


@kernel
def _fill(key: np.ndarray, out: np.ndarray) -> None:
    for i in range(out.size):
        out[i] = uniform(key, i)


def uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """The n uniforms of one frame, as the quantizers draw them: a fresh key from ``rng``, then
    value i's uniform (for references and tests; the codecs compute each in their loops)."""
    out = np.empty(n, np.float32)
    _fill(frame_key(rng), out)
    return out
