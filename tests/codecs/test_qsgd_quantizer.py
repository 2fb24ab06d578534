"""qsgd's compiled quantizer (norm, levels and sign bits of a bucket in one pass) against numpy:
the 16-lane sums of squares bit for bit against their definition, the norms within float32
rounding of the float64 norm (equal to it, rounded once, where the float32 sum is redone in
float64), and the levels and signs the reference quantizer gives from the frame's norms and
draws. Edge cases: all-zero buckets, values near 2**-50 whose squares fall near 2**-100, squares
that overflow float32, a short last bucket, buckets of 1..17 and 512 values. qsgdz's frames of
the same levels, in both layouts (Rice-coded, bit-packed), against the reference dequantization of qsgd's."""
from __future__ import annotations

import re
import struct

import numba
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from commlab.codecs import CodecError, decode_any, draws, get_codec, qsgd, qsgdz, squares, wire
from commlab.codecs.base import MAX_MAGNITUDE
from commlab.codecs.bitpack import reference_unpack

pytestmark = pytest.mark.filterwarnings("error")
PROPERTY = settings(max_examples=60, deadline=None)
EXACT_ABOVE = np.float32(2.0**-100)  # the float32 sums at or above it are kept


@numba.njit
def _sums(values: np.ndarray, start: int, count: int) -> tuple[np.float32, np.float64]:
    return squares.sum_squares(values, start, count), squares.sum_squares_wide(values, start, count)


# Magnitudes from subnormal to 2**100 (squares overflow float32 from 2**64), a sign, and zeros.
scales = st.sampled_from([0.0, 2.0**-140, 2.0**-60, 2.0**-52, 2.0**-48, 2.0**-20, 1.0, 2.0**20, 2.0**63, 2.0**70, 2.0**100])
mantissas = st.floats(-2, 2, width=32)


@st.composite
def bucketed(draw) -> tuple[np.ndarray, int]:
    """A vector of whole buckets and maybe a short last one, each bucket of one magnitude."""
    bucket = draw(st.one_of(st.integers(1, 17), st.just(512)))
    count = draw(st.integers(1, 4))
    tail = draw(st.integers(0, bucket - 1))
    parts = [np.array(draw(st.lists(mantissas, min_size=size, max_size=size)), np.float32) * np.float32(draw(scales))
             for size in [bucket] * count + ([tail] if tail else [])]
    return np.concatenate(parts).astype(np.float32), bucket


@given(arrays(np.float32, st.integers(0, 600), elements=st.floats(-2.0**100, 2.0**100, width=32)),
       st.integers(0, 20))
@example(np.zeros(17, np.float32), 0)
@example(np.full(512, 2.0**70, np.float32), 0)  # every float32 square overflows
@PROPERTY
def test_sums_of_squares_are_their_16_lane_definition(values, start):
    start = min(start, values.size)
    total, wide = _sums(values, start, values.size - start)
    assert np.float32(total).tobytes() == squares.reference_sum_squares(values[start:]).tobytes()
    assert np.float64(wide).tobytes() == squares.reference_sum_squares(values[start:], np.float64).tobytes()


def test_sums_of_squares_stay_within_their_array():
    with pytest.raises(IndexError):
        _sums(np.ones(20, np.float32), 10, 11)


def frame_sections(frame: bytes, numel: int, bucket: int, levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(norms, negative bits, levels) of a qsgd frame."""
    payload = np.frombuffer(frame, np.uint8, offset=wire.HEADER.size + frame[7])
    nb, sign_len = -(-numel // bucket), -(-numel // 8)
    norms = payload[: 4 * nb].view("<f4")
    signs = np.unpackbits(payload[4 * nb : 4 * nb + sign_len], bitorder="little")[:numel]
    return norms, signs, reference_unpack(payload[4 * nb + sign_len :], numel, levels.bit_length())


def reference_norms(vec: np.ndarray, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket: the float32 norm from the 16-lane sums (float32, or float64 where float32 is
    redone), and whether float32 was redone."""
    norms, redone = [], []
    for a in range(0, vec.size, bucket):
        total = squares.reference_sum_squares(vec[a : a + bucket])
        redo = not (total >= EXACT_ABOVE) or np.isinf(total)
        wide = squares.reference_sum_squares(vec[a : a + bucket], np.float64)
        norms.append(np.float32(np.sqrt(wide)) if redo else np.sqrt(total))
        redone.append(redo)
    return np.array(norms, np.float32), np.array(redone)


@given(bucketed(), st.sampled_from([1, 3, 4, 16, 255]))
@example((np.zeros(1000, np.float32), 512), 16)
@example((np.full(513, 2.0**-50, np.float32), 512), 4)  # float32 squares near 2**-100
@example((np.full(20, 2.0**100, np.float32), 7), 16)  # squares overflow float32
@example((np.array([9.890723e-39, -1e-45], np.float32), 2), 255)  # s / norm overflows float32
@PROPERTY
def test_quantizer_matches_numpy_from_the_frames_norms_and_draws(case, levels):
    vec, bucket = case
    frame = get_codec(f"qsgd{levels}", bucket=bucket, seed=5).encode(vec)
    norms, negative, got = frame_sections(frame, vec.size, bucket, levels)
    expected, redone = reference_norms(vec, bucket)
    assert norms.tobytes() == expected.tobytes()
    exact = np.array([np.linalg.norm(vec[a : a + bucket].astype(np.float64)) for a in range(0, vec.size, bucket)])
    # float32 rounding: each square and sum, one lane's adds and the four halvings, the square root
    # (and the subnormal grid of tiny norms).
    slack = (min(bucket, vec.size) // 16 + 8) * 2.0**-24
    assert np.all(np.abs(norms - exact) <= slack * exact + 2.0**-149)
    assert np.all(norms[redone] == exact[redone].astype(np.float32))
    per_value = np.repeat(norms, bucket)[: vec.size]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # 0 / 0 where a bucket is all zero
        factor = np.where(per_value > 0, (levels / per_value.astype(np.float64)).astype(np.float32), np.float32(0))
        u = draws.uniforms(np.random.default_rng(5), vec.size)
        scaled = np.where(factor == np.inf, np.abs(vec) / per_value * np.float32(levels), np.abs(vec) * factor)
    assert np.array_equal(got, np.minimum(np.floor(scaled + u), levels))
    assert np.array_equal(negative.astype(bool), (vec < 0) & (got > 0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 2.0**127])
def test_quantizer_refuses_norms_beyond_the_largest_magnitude(bad):
    vec = np.ones(1100, np.float32)
    vec[700] = bad
    with pytest.raises(CodecError, match=re.escape(f"qsgd16: values must be finite with bucket norms <= {MAX_MAGNITUDE:g}")):
        get_codec("qsgd16", seed=0).encode(vec)


def every_layout(vec: np.ndarray, bucket: int, levels: int, fixed: bytes) -> dict[int, bytes]:
    """The qsgdz frames of ``vec`` under seed 5 in each layout, the DENSE one from the qsgd frame
    ``fixed`` of the same draws; checks the sizes LevelCodes tells the encoder against the streams."""
    norms, q, negative = get_codec(f"qsgdz{levels}", bucket=bucket, seed=5)._quantize(vec)
    codes = qsgdz.LevelCodes(q, negative, vec.size, levels)
    pack = qsgdz.QSGDZ.params_struct.pack
    params, stream = codes.rice()
    assert codes.rice_least_bits() <= 8 * stream.size  # the encoder skips coding RICE by it
    frames = {qsgdz.RICE: wire.build(12, vec.size, pack(levels, bucket, qsgdz.RICE, *params), [norms, stream])}
    params, stream = codes.values()  # in the scratch array RICE's stream was in
    assert stream.size == -(-codes.value_bits // 8)  # the size the encoder compares
    frames[qsgdz.VALUES] = wire.build(12, vec.size, pack(levels, bucket, qsgdz.VALUES, *params), [norms, stream])
    params, parts, _ = codes.masks()
    assert codes.masks_least_bytes() <= sum(part.size for part in parts)  # the encoder skips coding MASKS by it
    frames[qsgdz.MASKS] = wire.build(12, vec.size, pack(levels, bucket, qsgdz.MASKS, *params), [norms, *parts])
    payload = fixed[wire.HEADER.size + fixed[7]:]
    frames[qsgdz.DENSE] = wire.build(12, vec.size, pack(levels, bucket, qsgdz.DENSE, 0, 0, 0, 0), [payload])
    return frames


def values_bits(got: np.ndarray) -> int:
    """The definition of the VALUES stream's length: per value (level >> k) + 1 + k bits, a sign
    bit per non-zero level, at the best k."""
    level = got.astype(np.int64)
    return min(int(((level >> k) + 1 + k).sum()) for k in range(8)) + np.count_nonzero(got)


def qsgdz_decodes_qsgds_levels(vec: np.ndarray, bucket: int, levels: int) -> np.ndarray:
    """Check that every layout of the qsgdz frame of ``vec`` decodes to the reference
    dequantization of the levels, signs and norms of the qsgd frame of the same draws, that the
    encoder sends the smallest of DENSE, VALUES and MASKS (in that order on a tie), or RICE where
    it is smaller still and the model of its runs put it ahead of MASKS, no more than wire_size,
    that the VALUES frame is as long as its definition, and that the coded frames count the
    non-zero levels; returns the levels."""
    fixed = get_codec(f"qsgd{levels}", bucket=bucket, seed=5).encode(vec)
    norms, negative, got = frame_sections(fixed, vec.size, bucket, levels)
    expected = qsgd.reference_dequantize(got, negative, norms, levels, bucket)
    frames = every_layout(vec, bucket, levels, fixed)
    for layout, frame in frames.items():
        assert decode_any(frame).tobytes() == expected.tobytes(), layout
    for layout in (qsgdz.RICE, qsgdz.VALUES, qsgdz.MASKS):
        assert struct.unpack_from("<I", frames[layout], wire.HEADER.size + 6)[0] == np.count_nonzero(got)
    values_payload = len(frames[qsgdz.VALUES]) - wire.HEADER.size - qsgdz.QSGDZ.params_struct.size - norms.nbytes
    assert values_payload == -(-values_bits(got) // 8)
    codec = get_codec(f"qsgdz{levels}", bucket=bucket, seed=5)
    frame = codec.encode(vec)
    best = min((frames[layout] for layout in (qsgdz.DENSE, qsgdz.VALUES, qsgdz.MASKS)), key=len)
    norms_, q, negative = get_codec(f"qsgdz{levels}", bucket=bucket, seed=5)._quantize(vec)
    codes = qsgdz.LevelCodes(q, negative, vec.size, levels)
    mask_bits = codes.masks()[2]
    rice_ahead = codes.rice_expected_gap_bits() < (1 - qsgdz.RICE_MARGIN) * mask_bits or best != frames[qsgdz.MASKS]
    assert frame == (frames[qsgdz.RICE] if rice_ahead and len(frames[qsgdz.RICE]) < len(best) else best)
    assert len(frame) <= codec.wire_size(vec.size) == len(frames[qsgdz.DENSE])
    return got


@given(bucketed(), st.sampled_from([1, 2, 3, 4, 7, 16, 255]))
@example((np.zeros(1000, np.float32), 512), 3)  # every level 0
@example((np.ones(1, np.float32), 1), 3)  # one value, of level s
@example((np.full(64, -1.0, np.float32), 1), 255)  # every level s, negative
@example((np.full(20, 2.0**100, np.float32), 7), 16)
@example((np.r_[100.0, np.full(511, 0.01)].astype(np.float32), 512), 255)  # level 255 among 0s and 1s: k 0
@PROPERTY
def test_qsgdz_decodes_to_the_reference_of_qsgds_levels(case, levels):
    qsgdz_decodes_qsgds_levels(*case, levels)


@pytest.mark.parametrize("levels", [3, 255])
def test_qsgdz_codes_every_level(levels):
    # Buckets of two values (1, x), x from 0 to 1: their levels run from 0 to s.
    x = np.linspace(0, 1, 4000, dtype=np.float32)
    vec = np.stack([np.ones_like(x), -x], axis=1).ravel()
    assert set(qsgdz_decodes_qsgds_levels(vec, 2, levels).tolist()) == set(range(levels + 1))


@pytest.mark.parametrize(("vec", "bucket", "levels", "layout"), [
    # buckets of 512 normal values at 3 levels: mostly zero levels, cheap as runs
    (np.random.default_rng(0).standard_normal(5000).astype(np.float32), 512, 3, qsgdz.RICE),
    # the same on 200 buckets: the coded bitmap's 128 bytes of code lengths are paid for, and
    # its size within RICE_MARGIN of RICE's runs
    (np.random.default_rng(0).standard_normal(512 * 200).astype(np.float32), 512, 3, qsgdz.MASKS),
    # at 1 level about 4 values in 100 are non-zero: a bit per bitmap byte costs more than runs
    (np.random.default_rng(0).standard_normal(512 * 200).astype(np.float32), 512, 1, qsgdz.RICE),
    # buckets of one value: every level s, 12 bits of Rice codes (no zeros before it, its sign,
    # 253 with k_level 7, no levels 1 after it) against 9 (8 bit-packed, a bit of the sign bitmap)
    (np.random.default_rng(0).standard_normal(5000).astype(np.float32), 1, 255, qsgdz.DENSE),
    # buckets of 512 normal values at 255 levels: most levels non-zero, 7.1 bits a value of runs,
    # signs and level codes against 5.7 of per-value codes (k 3) and signs
    (np.random.default_rng(0).standard_normal(5000).astype(np.float32), 512, 255, qsgdz.VALUES),
])
def test_qsgdz_sends_the_smaller_layout(vec, bucket, levels, layout):
    qsgdz_decodes_qsgds_levels(vec, bucket, levels)
    assert get_codec(f"qsgdz{levels}", bucket=bucket, seed=5).encode(vec)[wire.HEADER.size + 5] == layout


def test_qsgdz_codes_long_runs():
    # Codes whose quotients take many words: a run of 100,000 zero levels among others about 10
    # apart; at 4 levels in buckets of 16 ones (every level 1), a run of 200,000 levels 1 among
    # others about 50 long, between the levels above 1 of the values 40.
    rng = np.random.default_rng(1)
    vec = np.concatenate([rng.standard_normal(5000), np.zeros(100_000), rng.standard_normal(5000)]).astype(np.float32)
    qsgdz_decodes_qsgds_levels(vec, 512, 3)
    ones = np.ones(220_000, np.float32)
    ones[:20_000:50] = 40
    qsgdz_decodes_qsgds_levels(ones, 16, 4)
