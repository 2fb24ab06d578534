"""The fast paths against each codec's reference (the float maths in a few lines): bit-identical
where the codec is deterministic, on adversarial inputs (magnitudes 2**-60..2**60 within a block,
zeros, ties, NaN); the random codecs' draws on numpy's float32 grid."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from commlab.codecs import bitpack, decode_any, draws, get_codec, indices, int8, minmax, qsgd, signsgd, topk, wire

HEADER = wire.HEADER.size
pytestmark = pytest.mark.filterwarnings("error")
quick = settings(max_examples=100, deadline=None)


def adversarial(n: int, seed: int) -> np.ndarray:
    """Normal values scaled by 2**-60..2**60, a third of them zero, a few subnormal."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(np.float32)
    x[rng.random(n) < 0.3] = 0
    x[rng.random(n) < 0.01] = np.float32(1e-42)
    return x


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_signsgd_decodes_its_reference(block):
    x = adversarial(10_001, 5)
    frame = get_codec("signsgd", block=block).encode(x)
    sizes = signsgd.block_sizes(x.size, block)
    sums = [np.abs(x[a : a + block]).astype(np.float64).sum() for a in range(0, x.size, block)]
    scales = (np.array(sums) / sizes).astype(np.float32)
    ref = np.repeat(scales, sizes) * np.where(x < 0, np.float32(-1), np.float32(1))
    assert np.array_equal(bits(decode_any(frame)), bits(ref))


@given(st.integers(1, 3000), st.sampled_from([1, 7, 64, 1000]), st.integers(0, 2**32 - 1))
@quick
def test_signsgd_block_means_are_numpys_pairwise_sums(n, block, seed):
    """Values of few significant bits put many means at float32 midpoints, which take the pairwise
    sums; wide magnitudes make the vectorised sums inexact."""
    rng = np.random.default_rng(seed)
    x = (rng.integers(-64, 64, n) * np.exp2(rng.integers(-30, 30, n) * rng.integers(0, 2))).astype(np.float32)
    sums = [np.abs(x[a : a + block]).astype(np.float64).sum() for a in range(0, n, block)]
    expected = (np.array(sums) / signsgd.block_sizes(n, block)).astype(np.float32)
    means, negative = signsgd.means_and_signs(x, block)
    assert np.array_equal(bits(means), bits(expected))
    assert np.array_equal(negative, x < 0)


def frame_parts(frame: bytes, *sizes: int) -> list[np.ndarray]:
    """Consecutive uint8 sections of a frame's payload, of the given byte sizes (the rest last)."""
    payload = np.frombuffer(frame, np.uint8, offset=HEADER + frame[7])
    return np.split(payload, np.cumsum(sizes))


@pytest.mark.parametrize("name", ["qsgd1", "qsgd4", "qsgd16", "qsgd255"])
@pytest.mark.parametrize("bucket", [64, 100])  # whole bitmap bytes a bucket, and not
def test_qsgd_decodes_its_reference(name, bucket):
    x = adversarial(5003, 1)
    x[np.abs(x) > 2.0**50] = 1  # bucket norms within float32
    codec = get_codec(name, bucket=bucket, seed=3)
    frame = codec.encode(x)
    nb, b = -(-x.size // bucket), codec.levels.bit_length()
    norms, signs, packed = frame_parts(frame, 4 * nb, -(-x.size // 8))
    levels = bitpack.reference_unpack(packed, x.size, b)
    negative = np.unpackbits(signs, bitorder="little")[: x.size]
    ref = qsgd.reference_dequantize(levels, negative, norms.view("<f4"), codec.levels, bucket)
    assert np.array_equal(bits(decode_any(frame)), bits(ref))
    assert np.array_equal(negative.astype(bool), (x < 0) & (levels > 0))


@pytest.mark.parametrize("name", ["qsgd1", "qsgd4", "qsgd16"])
def test_qsgd_levels_are_its_definition_with_the_frames_draws(name):
    x = adversarial(5003, 6)
    x[np.abs(x) > 2.0**50] = 1
    codec = get_codec(name, bucket=64, seed=8)
    rng = np.random.default_rng(8)  # the codec's Generator: one key per frame
    for _ in range(2):
        frame = codec.encode(x)
        nb, s = -(-x.size // 64), codec.levels
        norms, _, packed = frame_parts(frame, 4 * nb, -(-x.size // 8))
        norms = np.repeat(norms.view("<f4"), 64)[: x.size]
        factor = np.where(norms > 0, (s / norms.astype(np.float64)).astype(np.float32), np.float32(0))
        u = draws.uniforms(rng, x.size)
        expected = np.minimum(np.floor(np.abs(x) * factor + u), s)  # float32 throughout
        assert np.array_equal(bitpack.reference_unpack(packed, x.size, s.bit_length()), expected)


def test_terngrad_decodes_its_reference():
    x = adversarial(9000, 2)
    x[np.abs(x) > 2.0**100] = 1
    frame = get_codec("terngrad", block=100, seed=4).encode(x)
    nb = -(-x.size // 100)
    s, nonzero, negative = frame_parts(frame, 4 * nb, -(-x.size // 8))
    b = np.unpackbits(nonzero, bitorder="little")[: x.size].astype(np.float32)
    sign = np.where(np.unpackbits(negative, bitorder="little")[: x.size], np.float32(-1), np.float32(1))
    ref = np.repeat(s.view("<f4"), 100)[: x.size] * (b * sign)
    assert np.array_equal(bits(decode_any(frame)), bits(ref))


@given(arrays(np.float32, st.integers(1, 3000), elements=st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.nan, np.inf, 1e-45])),
       st.floats(0.001, 1.0))
@quick
def test_top_k_selection_is_its_reference_with_ties_and_nan(x, ratio):
    positions, values = topk.select(x, ratio)
    assert np.array_equal(positions, topk.reference_select(x, ratio))
    assert np.array_equal(bits(values), bits(x[positions]))


@pytest.mark.parametrize("n", [70_000, 1_000_003])
def test_top_k_selection_is_its_reference_on_large_vectors(n):
    for x in (adversarial(n, 7), np.sort(np.abs(adversarial(n, 8))), np.round(adversarial(n, 9) * 0) + 1):
        for ratio in (0.001, 0.1, 0.5):
            assert np.array_equal(topk.select(x, ratio)[0], topk.reference_select(x, ratio))


def test_top_k_selection_past_the_last_whole_block_is_its_reference():
    """Candidates found 16 at a time and the values past the last whole block of 16 one by one
    (vectors of a few values more than a multiple of 16): the same positions as the reference."""
    for x in (adversarial(70_001, 7), np.sort(np.abs(adversarial(70_013, 8)))):
        for ratio in (0.001, 0.1, 0.5):
            assert np.array_equal(topk.select(x, ratio)[0], topk.reference_select(x, ratio))


keys_with_ties = arrays(np.uint32, st.integers(0, 200), elements=st.sampled_from([0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1]))


@given(arrays(np.float32, st.integers(0, 300), elements=st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.nan, -np.inf])),
       st.sampled_from([0, 1, 0x3F800000, 0x7F800000, 0x7FC00000]))
@quick
def test_top_k_candidates_are_the_magnitudes_at_least_the_mark(x, low):
    positions, values = np.empty(x.size + 16, np.int32), np.empty(x.size + 16, np.float32)
    count = topk._flagged(x, np.uint32(low), positions, values)
    expected = np.flatnonzero(topk.magnitudes(x) >= low)
    assert np.array_equal(positions[:count], expected)
    assert np.array_equal(bits(values[:count]), bits(x[expected]))


@given(st.one_of(keys_with_ties, arrays(np.uint32, st.integers(1, 500))), st.data())
@quick
def test_top_k_kth_smallest_is_where_numpy_partitions(keys, data):
    if keys.size:
        rank = data.draw(st.integers(0, keys.size - 1))
        assert topk._kth_smallest(keys, rank) == np.partition(keys, rank)[rank]


@given(st.integers(1, 300), st.data())
@quick
def test_top_k_spread_puts_the_values_at_their_positions(numel, data):
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, numel - 1)))), np.int64)
    values = np.arange(1, idx.size + 1, dtype=np.float32)
    expected = np.zeros(numel, np.float32)
    expected[idx] = values
    masks = indices.decode_masks(*indices.encode(idx, numel), numel, idx.size)
    assert np.array_equal(topk.spread(masks, values, numel), expected)


@given(keys_with_ties, st.sampled_from([0, 1, 7, 2**31, 2**32 - 1]))
@quick
def test_top_k_band_is_the_keys_below_the_high_mark(keys, high):
    out = np.empty(keys.size + 16, np.uint32)
    count = topk._below(keys, np.uint32(high), out)
    assert np.array_equal(out[:count], keys[keys < high])


@given(keys_with_ties, st.sampled_from([0, 1, 7, 2**31, 2**32 - 1]), st.integers(0, 300))
@quick
def test_top_k_keeps_the_keys_above_the_kth_and_the_first_ties(keys, kth, ties):
    ties = min(ties, np.count_nonzero(keys == kth))
    candidates = np.arange(keys.size, dtype=np.int32) * 3
    values = np.arange(keys.size, dtype=np.float32) / 2
    kept = np.flatnonzero((keys > kth) | ((keys == kth) & (np.cumsum(keys == kth) <= ties)))
    positions, kept_values = np.empty(kept.size + 16, np.int32), np.empty(kept.size + 16, np.float32)
    topk._keep(candidates, keys, values, np.uint32(kth), ties, positions, kept_values)
    assert np.array_equal(positions[: kept.size], candidates[kept])
    assert np.array_equal(kept_values[: kept.size], values[kept])


def test_uniforms_are_on_numpys_float32_grid_and_seeded():
    a, b = draws.uniforms(np.random.default_rng(5), 100_000), draws.uniforms(np.random.default_rng(5), 100_000)
    assert a.dtype == np.float32 and np.array_equal(a, b)
    grid = a.astype(np.float64) * 2**24
    assert np.array_equal(grid, np.floor(grid)) and a.min() >= 0 and a.max() < 1
    # Two frames of one codec draw different uniforms: each takes a fresh key from the Generator.
    rng = np.random.default_rng(5)
    assert not np.array_equal(draws.uniforms(rng, 1000), draws.uniforms(rng, 1000))
    # Means of 10 groups of 10,000 within 6 standard deviations (1/sqrt(12 * 10,000)).
    assert np.all(np.abs(a.reshape(10, -1).mean(axis=1) - 0.5) < 6 / np.sqrt(12 * 10_000))


def reference_words(key: np.ndarray, n: int) -> np.ndarray:
    """The generator of draws.py in numpy's uint32 arithmetic: lowbias32((k0 + i * 0x9E3779B9) ^ k1)."""
    x = (np.uint32(key[0]) + np.arange(n, dtype=np.uint32) * np.uint32(0x9E3779B9)) ^ np.uint32(key[1])
    x = (x ^ (x >> np.uint32(16))) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> np.uint32(15))) * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def test_uniforms_are_the_documented_generator():
    key = draws.frame_key(np.random.default_rng(7))
    expected = (reference_words(key, 70_001) >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
    assert np.array_equal(draws.uniforms(np.random.default_rng(7), 70_001), expected)
    # Pinned answers (the generator fixes the frames of a seeded run: changing it must be deliberate).
    assert reference_words(np.array([0, 0], np.uint32), 1)[0] == 0
    assert reference_words(np.array([1, 0], np.uint32), 1)[0] == 0x688990C0
    assert reference_words(np.array([0, 1], np.uint32), 2)[1] == reference_words(np.array([0x9E3779B9 ^ 1, 0], np.uint32), 1)[0]
    # Within a frame the words are distinct (a bijection of distinct counters), and about
    # half of each bit is set.
    words = reference_words(key, 1 << 20)
    assert np.unique(words).size == words.size
    ones = ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 6 * 0.5 / 2**10)


def test_key_bytes_are_the_generators_words_under_the_seeds_splitmix64_key():
    # SplitMix64 from state 0: its first two outputs (known answers) key streams 0 and 1 of seed 0.
    assert draws.stream_key(0, 0).tolist() == [0x7B1DCDAF, 0xE220A839]
    assert draws.stream_key(0, 1).tolist() == [0xA1B965F4, 0x6E789E6A]
    for seed, stream, n in [(0, 0, 1), (2**64 - 1, 3, 4099), (12345, 1, 70_001)]:
        expected = reference_words(draws.stream_key(seed, stream), -(-n // 4)).astype("<u4").view(np.uint8)[:n]
        assert np.array_equal(draws.key_bytes(seed, stream, n), expected)


@pytest.mark.parametrize("name", ["qsgd4", "qsgdz3", "terngrad", "minmax2", "fp32_sparse", "signsgd"])
def test_encoders_in_threads_give_the_frames_they_give_alone(name):
    # Encoders reuse per-thread scratch arrays (scratch.py): threads must not see each other's.
    vecs = [adversarial(20_000 + 1000 * i, 10 + i) for i in range(4)]
    for v in vecs:
        v[np.abs(v) > 2.0**40] = 1
    params = {"seed": 1} if name.startswith(("qsgd", "terngrad")) else {}

    def frames(v):
        codec = get_codec(name, **params)
        return [codec.encode(v) for _ in range(5)]
    alone = [frames(v) for v in vecs]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(frames, vecs)) == alone


# Chunks of values whose magnitudes span 2**-30..2**30, with zeros, signed zeros and repeats (ties
# at the rounding points): every chunk's scale is normal, so the references' reciprocals are finite.
moderate = arrays(np.float32, st.integers(1, 3000),
                  elements=st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.5]),
                                     st.floats(-2.0**30, 2.0**30, width=32).filter(lambda v: v == 0 or abs(v) > 2.0**-30)))


@given(moderate, st.sampled_from([1, 7, 64, 8192]))
@quick
def test_int8_frames_are_its_reference(x, chunk):
    frame = get_codec("int8", chunk=chunk).encode(x)
    scales, levels = int8.reference_quantize(x, chunk)
    nc = scales.size
    ref_scales, ref_levels = frame_parts(frame, 4 * nc)
    assert np.array_equal(bits(ref_scales.view("<f4")), bits(scales)) and np.array_equal(ref_levels.view(np.int8), levels)
    assert np.array_equal(bits(decode_any(frame)), bits(levels.astype(np.float32) * np.repeat(scales, chunk)[: x.size]))


@given(moderate, st.integers(1, 8), st.sampled_from([1, 9, 256, 8192]))
@quick
def test_minmax_frames_are_its_reference(x, n, chunk):
    frame = get_codec(f"minmax{n}", chunk=chunk).encode(x)
    lows, scales, levels = minmax.reference_levels(x, n, chunk)
    head, packed = frame_parts(frame, 8 * lows.size)
    assert np.array_equal(bits(head.view("<f4")), bits(np.stack([lows, scales], axis=1).reshape(-1)))
    assert np.array_equal(packed, bitpack.reference_pack(levels, n))
    ref = levels.astype(np.float32) * np.repeat(scales, chunk)[: x.size] + np.repeat(lows, chunk)[: x.size]
    assert np.array_equal(bits(decode_any(frame)), bits(ref))
