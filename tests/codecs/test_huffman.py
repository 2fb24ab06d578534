"""huffman.py, qsgdz's canonical codes of bytes: optimal lengths where none is above the limit,
complete prefix codes of at most LIMIT bits otherwise, a table that decodes every code (one byte
or two a lookup), and the refusal of lengths that are no prefix code; bitops.py's bit gather and
scatter against their definitions, and the same frames where the machine has no BMI2."""
from __future__ import annotations

import heapq
import os
import platform
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from llvmlite import binding as llvm

from commlab.codecs import CodecError, bitops, huffman

counts_of_bytes = arrays(np.int64, huffman.SYMBOLS, elements=st.one_of(st.just(0), st.integers(1, 10**6)))


def reference_cost(counts: np.ndarray) -> int:
    """The bits of an optimal (unlimited) Huffman code of the counts: the sum of its merges."""
    heap = [int(c) for c in counts if c]
    heapq.heapify(heap)
    total = 0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        total += merged
        heapq.heappush(heap, merged)
    return total


def is_prefix_free(lengths: np.ndarray, codes: np.ndarray) -> bool:
    items = [(int(codes[s]), int(lengths[s])) for s in range(huffman.SYMBOLS) if lengths[s]]
    return not any(a != b and la <= lb and b & ((1 << la) - 1) == a for a, la in items for b, lb in items)


@given(counts_of_bytes)
@settings(max_examples=150, deadline=None)
def test_lengths_make_a_complete_prefix_code_of_at_most_the_limit(counts):
    lengths = huffman.code_lengths(counts)
    present = int(np.count_nonzero(counts))
    assert ((lengths > 0) == (counts > 0)).all() and lengths.max(initial=0) <= huffman.LIMIT
    kraft = sum(2.0 ** -int(length) for length in lengths if length)
    assert kraft == (0.0 if present == 0 else 0.5 if present == 1 else 1.0)
    assert is_prefix_free(lengths, huffman.codes(lengths))
    cost = int(counts @ lengths.astype(np.int64))
    if present > 1:
        assert cost >= reference_cost(counts)
    optimal = lengths.max(initial=0) < huffman.LIMIT  # no length was shortened: an optimal code
    if optimal and present > 1:
        assert cost == reference_cost(counts)


def test_rare_bytes_get_codes_of_at_most_the_limit():
    # Counts doubling from 1: optimal lengths run to 255 bits; shortened they cost a little more.
    counts = np.array([1 << min(i, 40) for i in range(huffman.SYMBOLS)], np.int64)
    lengths = huffman.code_lengths(counts)
    assert lengths.max() == huffman.LIMIT and sum(2.0 ** -int(x) for x in lengths) == 1.0
    assert int(counts @ lengths.astype(np.int64)) < 1.01 * reference_cost(counts)


@given(counts_of_bytes.filter(lambda c: np.count_nonzero(c) > 0), st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_the_table_decodes_every_code_one_or_two_at_a_time(counts, seed):
    lengths, rng = huffman.code_lengths(counts), np.random.default_rng(seed)
    codes, table = huffman.codes(lengths), huffman.decoding_table(lengths, "test")
    symbols = rng.choice(np.flatnonzero(counts), 200)
    stream = "".join(format(int(codes[s]), f"0{int(lengths[s])}b")[::-1] for s in symbols) + "0" * 32
    at, decoded = 0, []
    while len(decoded) < symbols.size:
        window = int(stream[at: at + huffman.LIMIT][::-1], 2)
        entry = int(table[window])
        first = (entry >> 24) & 15
        assert first == lengths[symbols[len(decoded)]] and entry & 255 == symbols[len(decoded)]
        if entry >> 28 and len(decoded) + 1 < symbols.size:  # two codes in the window
            assert (entry >> 8) & 255 == symbols[len(decoded) + 1]
            assert (entry >> 16) & 255 == first + lengths[symbols[len(decoded) + 1]]
        decoded.append(entry & 255)
        at += first
    assert decoded == symbols.tolist()


def test_lengths_in_a_frame_are_checked():
    lengths = np.zeros(huffman.SYMBOLS, np.uint8)
    lengths[:3] = 1  # three codes of one bit
    with pytest.raises(CodecError, match="code lengths that are no prefix code"):
        huffman.decoding_table(lengths, "qsgdz")
    lengths[:3] = (1, 2, 13)
    with pytest.raises(CodecError, match="a code length above 12 bits"):
        huffman.decoding_table(lengths, "qsgdz")
    lengths[:3] = (2, 0, 0)  # an incomplete code: windows no code starts are marked
    table = huffman.decoding_table(lengths, "qsgdz")
    assert (table[0::4] != 0).all() and (table[1::4] == 0).all()
    assert (huffman.unpack_lengths(huffman.pack_lengths(lengths)) == lengths).all()


@numba.njit
def both(v, m):
    return bitops.pext(v, m), bitops.pdep(v, m)


def pext_definition(value: int, mask: int) -> int:
    bits = [(value >> j) & 1 for j in range(64) if (mask >> j) & 1]
    return sum(bit << i for i, bit in enumerate(bits))


def pdep_definition(value: int, mask: int) -> int:
    places = [j for j in range(64) if (mask >> j) & 1]
    return sum(((value >> i) & 1) << j for i, j in enumerate(places))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
@settings(max_examples=300, deadline=None)
def test_bit_gather_and_scatter_match_their_definitions(value, mask):
    v, m = np.uint64(value), np.uint64(mask)
    assert [int(x) for x in both(v, m)] == [pext_definition(value, mask), pdep_definition(value, mask)]
    # The loops a target without BMI2 runs.
    assert int(bitops._pext_loop(v, m)) == pext_definition(value, mask)
    assert int(bitops._pdep_loop(v, m)) == pdep_definition(value, mask)


_FRAME_PROGRAM = """
import hashlib, numpy as np
from commlab.codecs import decode_any, get_codec
vec = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
frame = get_codec("qsgdz3", seed=0).encode(vec)
print(hashlib.sha256(frame).hexdigest(), hashlib.sha256(decode_any(frame).tobytes()).hexdigest())
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="BMI2 is an x86 feature")
def test_a_machine_without_bmi2_codes_the_same_bitmap_frames(tmp_path):
    # Compiled for this host's features without BMI2 (a fresh cache): the loops stand in for
    # pext and pdep, and the frame and its decoded vector are the same bytes as the host's (its
    # own cache, which the suite's other qsgdz runs share).
    def run(features: str | None) -> str:
        env = dict(os.environ)
        if features is not None:
            env.update(NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=str(tmp_path))
        done = subprocess.run([sys.executable, "-c", _FRAME_PROGRAM], env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout
    host = llvm.get_host_cpu_features().flatten()
    without = ",".join("-bmi2" if f == "+bmi2" else f for f in host.split(","))
    assert run(without) == run(None)
