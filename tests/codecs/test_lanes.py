"""lanes.py, the 16-lane operations of the compiled loops, against numpy: the byte masks, popcount,
compress (the selected lanes packed), expand (packed values spread back over the lanes) and the
byte deltas of varints."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import numba
import pytest
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from llvmlite import binding as llvm

from commlab.codecs import lanes

quick = settings(max_examples=200)
masks = st.integers(0, 2**16 - 1)
blocks = arrays(np.uint8, lanes.LANES)
values = arrays(np.float32, lanes.LANES, elements=st.floats(width=32, allow_nan=True))


@numba.njit
def _masks(keys, cut):
    return lanes.below(keys, 0, cut), lanes.equal(keys, 0, cut), lanes.popcount(lanes.below(keys, 0, cut))


@numba.njit
def _masks_64(keys, cut):
    return lanes.below_64(keys, 0, cut), lanes.equal_64(keys, 0, cut), lanes.popcount(lanes.equal_64(keys, 0, cut))


@numba.njit
def _magnitude_at_least(words, start, mark):
    return lanes.magnitude_at_least(words, start, mark)


@numba.njit
def _compress(src, start, mask, dst, at):
    lanes.compress(src, start, mask, dst, at)


@numba.njit
def _expand(src, at, mask, dst, start):
    lanes.expand(src, at, mask, dst, start)


@numba.njit
def _byte_deltas(idx, start, out, at):
    return lanes.byte_deltas(idx, start, out, at)


def bits_of(mask: int, width: int = lanes.LANES) -> np.ndarray:
    return (np.uint64(mask) >> np.arange(width, dtype=np.uint64)) & np.uint64(1) == 1


@given(blocks, st.integers(0, 255))
@quick
def test_byte_masks_and_popcount_match_numpy(keys, cut):
    below, equal, count = _masks(keys, cut)
    assert np.array_equal(bits_of(below), keys < cut) and np.array_equal(bits_of(equal), keys == cut)
    assert count == np.count_nonzero(keys < cut)


@given(arrays(np.uint8, lanes.BYTE_LANES), st.integers(0, 255))
@quick
def test_64_byte_masks_match_numpy(keys, cut):
    below, equal, count = _masks_64(keys, cut)
    assert np.array_equal(bits_of(below, lanes.BYTE_LANES), keys < cut)
    assert np.array_equal(bits_of(equal, lanes.BYTE_LANES), keys == cut)
    assert count == np.count_nonzero(keys == cut)


@given(arrays(np.uint32, lanes.LANES + 3), st.integers(0, 3),
       st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1])))
@quick
def test_magnitude_masks_compare_the_low_31_bits(words, start, mark):
    """Float32 bits with their sign cleared (topk.magnitudes) against a mark, any 32-bit one."""
    at_least = _magnitude_at_least(words, start, mark)
    block = words[start: start + lanes.LANES]
    assert np.array_equal(bits_of(at_least), (block & np.uint32(0x7FFFFFFF)) >= mark)


def test_magnitude_masks_refuse_keys_of_31_bits_or_fewer():
    with pytest.raises(numba.core.errors.TypingError, match="low 31 bits"):
        _magnitude_at_least(np.zeros(16, np.uint16), 0, 1)


@given(values, masks, st.integers(0, 3))
@quick
def test_compress_packs_the_selected_lanes_in_order(src, mask, at):
    dst = np.full(at + lanes.LANES, -1, np.float32)
    _compress(np.concatenate([np.zeros(2, np.float32), src]), 2, mask, dst, at)
    kept = src[bits_of(mask)]
    assert np.array_equal(dst[at: at + kept.size].view(np.uint32), kept.view(np.uint32))  # NaNs bit for bit
    assert np.all(dst[:at] == -1)


@given(values, masks, st.integers(0, 3))
@quick
def test_expand_spreads_packed_values_over_the_selected_lanes(src, mask, at):
    selected = bits_of(mask)
    packed = np.concatenate([np.full(at, 7, np.float32), src[selected]])  # exactly what expand may read
    dst = np.full(lanes.LANES + 1, -1, np.float32)
    _expand(packed, at, mask, dst, 1)
    expected = np.where(selected, src, np.float32(0))
    assert np.array_equal(dst[1:].view(np.uint32), expected.view(np.uint32)) and dst[0] == -1


@given(arrays(np.int32, lanes.LANES), masks)
@quick
def test_compress_and_expand_take_integer_lanes(src, mask):
    packed, back = np.empty(lanes.LANES, np.int32), np.empty(lanes.LANES, np.int32)
    _compress(src, 0, mask, packed, 0)
    _expand(packed, 0, mask, back, 0)
    assert np.array_equal(back, np.where(bits_of(mask), src, 0))


@given(arrays(np.int32, lanes.LANES + 3, elements=st.integers(-2**31, 2**31 - 1)), st.integers(1, 3))
@quick
def test_byte_deltas_are_the_low_bytes_of_the_differences(idx, start):
    out = np.full(lanes.LANES + 2, 7, np.uint8)
    small = _byte_deltas(idx, start, out, 1)
    deltas = idx[start: start + lanes.LANES].astype(np.int64) - idx[start - 1: start + lanes.LANES - 1]
    assert np.array_equal(out[1:-1], (deltas & 0xFF).astype(np.uint8))
    assert out[0] == out[-1] == 7
    assert np.array_equal(bits_of(small), (deltas & 0xFFFFFFFF) < 0x80)  # unsigned: no negative delta is small


def test_blocks_beyond_their_arrays_are_refused():
    src, dst = np.arange(20, dtype=np.float32), np.empty(20, np.float32)
    with pytest.raises(IndexError):
        _compress(src, 5, 0xFFFF, dst, 0)  # reads src[5:21]
    with pytest.raises(IndexError):
        _compress(src, 0, 0xFFFF, dst, 5)  # writes dst[5:21]
    with pytest.raises(IndexError):
        _expand(src[:3], 0, 0xF, dst, 0)  # 4 values asked of 3
    _expand(src[:3], 0, 0x7, dst, 4)
    assert dst[4:7].tolist() == [0, 1, 2]
    with pytest.raises(IndexError):
        _masks(np.zeros(15, np.uint8), 1)
    with pytest.raises(IndexError):
        _byte_deltas(np.arange(20, dtype=np.int32), 0, np.empty(16, np.uint8), 0)  # idx[-1] asked for
    with pytest.raises(IndexError):
        _byte_deltas(np.arange(20, dtype=np.int32), 1, np.empty(16, np.uint8), 1)  # writes out[1:17]


def test_only_4_byte_lanes_compile():
    # LLVM 20 splits a compress of 16 8-byte elements in two, and the code it made crashed.
    with pytest.raises(numba.core.errors.TypingError, match="4-byte elements only"):
        _compress(np.zeros(16, np.int64), 0, 1, np.zeros(16, np.int64), 0)


_AVX2_PROGRAM = """
import numpy as np
from commlab.codecs import lanes
rng = np.random.default_rng(0)
for dtype in (np.float32, np.int32, np.uint32):
    vec = rng.standard_normal(40).astype(np.float32).astype(dtype)
    masks = rng.integers(0, 2**16, 3).astype(np.uint16)
    masks[-1] &= 0xFF  # the last block holds 8 values
    packed = np.empty(40 + lanes.LANES, dtype)
    lanes.pack_blocks(masks, vec, packed)
    chosen = ((masks[:, None] >> np.arange(16)) & 1 == 1).ravel()[:40]
    assert (packed[: chosen.sum()] == vec[chosen]).all(), dtype
    spread = np.empty(40, dtype)
    lanes.spread_blocks(masks, packed[: chosen.sum()].copy(), spread)
    assert (spread == np.where(chosen, vec, 0)).all(), dtype
for fn in (lanes.pack_blocks, lanes.spread_blocks):  # AVX2's permutation, not a load or store per lane
    assert all("vpermd" in asm for asm in fn.inspect_asm().values()), fn
print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 is an x86 target")
def test_lanes_compile_for_a_machine_with_avx2_and_without_avx512(tmp_path):
    # On AVX2, LLVM expands a compress of 16 floats into scalar code, and its expansion aborted
    # the process; lanes_avx2 replaces it there. Compile for such a CPU (numba's target: this
    # host's features without AVX-512, a fresh cache) whatever this one is.
    features = ",".join("-" + f[1:] if f.startswith("+avx512") else f
                        for f in llvm.get_host_cpu_features().flatten().split(","))
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features,
           "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _AVX2_PROGRAM], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
