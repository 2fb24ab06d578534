"""Random draws of the codecs: the uniforms of the stochastic quantizers (qsgd, terngrad) and the
bytes randomk builds its index set from.

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
needs the uniforms (the frame carries the levels), so they are no part of the wire format (the
generator is, through randomk's key bytes, below).
Every operation is a 32-bit integer one: numpy's scalar ufuncs keep numba from widening them to 64
bits, and the loops vectorise.

Key bytes: randomk's sender and receiver both derive them from a frame's 64-bit seed, so they are
part of the wire format. Stream s of seed S (s counts randomk's levels of ties) is the generator's
words 0, 1, 2, ... under the key (k0, k1) = the low and high halves of SplitMix64's first output
from the state S + s * 0x9E3779B97F4A7C15, each word's four bytes little-endian: a word makes four
positions' bytes, in a loop that vectorises (wire versions 2 and 3 took an AES-128-CTR keystream,
several times slower to make). The bytes need only be uniform and independent for every m-subset
of the positions to be equally likely (randomk.py), as the tests check.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.jit import kernel

_GAMMA = np.uint32(0x9E3779B9)
_MIX1, _MIX2 = np.uint32(0x7FEB352D), np.uint32(0x846CA68B)
_S8, _S15, _S16 = np.uint32(8), np.uint32(15), np.uint32(16)
_GRID = np.float32(2.0**-24)


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


def uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """The n uniforms of one frame, as the quantizers draw them: a fresh key from ``rng``, then
    value i's uniform from its word (for references and tests; the codecs compute each in their
    loops)."""
    words = np.empty(n, np.uint32)
    _fill_words(frame_key(rng), words)
    return (words >> _S8).astype(np.float32) * _GRID


_U64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15


def _splitmix64(x: int) -> int:
    z = (x + _GOLDEN64) & _U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def stream_key(seed: int, stream: int) -> np.ndarray:
    """The key (k0, k1) of stream ``stream`` of a 64-bit frame seed (see above)."""
    z = _splitmix64((seed + stream * _GOLDEN64) & _U64)
    return np.array([z & 0xFFFFFFFF, z >> 32], np.uint32)


@kernel
def _fill_words(key: np.ndarray, out: np.ndarray) -> None:
    for i in range(out.size):
        out[i] = word(key, i)


def key_bytes(seed: int, stream: int, n: int) -> np.ndarray:
    """The first ``n`` bytes (uint8) of stream ``stream`` of a frame seed (see above)."""
    words = np.empty(-(-n // 4), "<u4")
    _fill_words(stream_key(seed, stream), words)
    return words.view(np.uint8)[:n]
