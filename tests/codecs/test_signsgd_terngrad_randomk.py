"""signsgd, terngrad and randomk: float references (block-wise scales), hypothesis round trips,
exact wire sizes and randomk's seed-regenerated index sets (their malformed frames:
test_malformed_frames.py; error feedback: test_error_feedback.py)."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from commlab.codecs import CodecError, decode_any, draws, get_codec, randomk, wire

HEADER = wire.HEADER.size
NEW = ["signsgd", "terngrad", "randomk"]
quick = settings(max_examples=100)
pytestmark = pytest.mark.filterwarnings("error")

BOUND = float(np.nextafter(np.float32(1e30), np.float32(0)))
vectors = arrays(np.float32, st.integers(0, 5000), elements=st.floats(-BOUND, BOUND, width=32))
names = st.sampled_from(NEW)
blocks = st.one_of(st.integers(1, 40), st.sampled_from([256, 1024, 4096, 2**31]))
SCALED = ("signsgd", "terngrad")  # the block-scaled ones
DEFAULT_BLOCK = {"signsgd": 64, "terngrad": 1024}


def rand(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def frame_param_bytes(frame: bytes) -> bytes:
    return frame[HEADER : HEADER + frame[7]]


def per_block(x: np.ndarray, block: int, reduce) -> np.ndarray:
    """reduce() of each block of x in float64, repeated over the block's values (the reference)."""
    out = np.zeros(x.size, np.float64)
    for a in range(0, x.size, block):
        out[a : a + block] = reduce(x[a : a + block].astype(np.float64))
    return out


# --- float references ----------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 3, 64, 1024, 5000])
def test_signsgd_matches_reference(block):
    # Layers of very different magnitude: each block gets its own mean magnitude.
    layered = np.concatenate([rand(700) * 1e-4, rand(300, 2) * 10, rand(33, 3)])
    for x in (rand(1000), rand(9, 1) * 1e20, np.array([0.0, -0.0, 2.0, -4.0], np.float32), layered):
        ref = per_block(x, block, lambda b: np.abs(b).mean()).astype(np.float32) * np.where(x < 0, -1, 1)
        out = decode_any(get_codec("signsgd", block=block).encode(x))
        np.testing.assert_allclose(out, ref, rtol=1e-6)
        assert np.array_equal(np.signbit(out), x < 0)  # zero and -0.0 map to +1
    assert np.array_equal(decode_any(get_codec("signsgd").encode(np.array([0.0, -0.0], np.float32))), [0, 0])


def test_block_scales_follow_the_layers():
    x = np.concatenate([np.full(1024, 1e-4), np.full(1024, -3.0)]).astype(np.float32)
    out = decode_any(get_codec("signsgd").encode(x))
    assert np.allclose(out[:1024], 1e-4) and np.allclose(out[1024:], -3.0)
    one = decode_any(get_codec("signsgd", block=2048).encode(x))  # one scale: the small layer is 15000x too big
    assert np.allclose(np.abs(one), (1e-4 + 3.0) / 2)


@pytest.mark.parametrize("block", [1, 7, 256, 1024])
def test_terngrad_matches_reference_with_the_same_draws(block):
    x = np.concatenate([rand(500) * 3, rand(500, 1) * 1e-3])
    x[:3] = [0.0, x.max() * 2, -x.max() * 3]  # a zero and the unique max magnitude (negative)
    codec = get_codec("terngrad", block=block, seed=11)
    outs = [decode_any(codec.encode(x)) for _ in range(2)]
    rng = np.random.default_rng(11)
    s = per_block(x, block, lambda b: np.abs(b).max()).astype(np.float32)
    for out in outs:
        p = np.divide(np.abs(x), s, out=np.zeros_like(x), where=s > 0)
        b = draws.uniforms(rng, x.size) < p  # the codec's draws: a key per frame from its Generator
        assert np.array_equal(out, s * np.sign(x) * b)
    assert out[0] == 0 and out[2] == -s[2]
    # Fresh Bernoulli variables per encode (blocks of 1 are exact: every p is 0 or 1).
    assert np.array_equal(outs[0], outs[1]) == (block == 1)


@pytest.mark.parametrize("block", [8, 1024])
def test_terngrad_is_unbiased(block):
    x = rand(40, 2) * np.repeat([10, 1e-3, 1, 100, 0.1], 8).astype(np.float32)
    x[0] = 0
    codec, draws = get_codec("terngrad", block=block, seed=3), 4000
    s = per_block(x, block, lambda b: np.abs(b).max()).astype(np.float32)
    total = np.zeros(x.size, np.float64)
    for _ in range(draws):
        out = decode_any(codec.encode(x))
        assert np.all((out == 0) | (np.abs(out) == s))
        total += out
    # One draw has std s * sqrt(p (1 - p)) <= s / 2 per element.
    assert np.all(np.abs(total / draws - x) <= 6 * s / (2 * math.sqrt(draws)))


def test_randomk_matches_reference():
    x = rand(1000) + 10  # no zeros, so the kept set is visible in the output
    frame = get_codec("randomk", ratio=0.05).encode(x)
    seed, k = struct.unpack("<QQ", frame_param_bytes(frame))
    idx = randomk.positions(seed, x.size, k)
    ref = np.zeros_like(x)
    ref[idx] = x[idx]
    assert k == 50 and np.array_equal(decode_any(frame), ref)
    assert np.array_equal(idx, np.sort(np.unique(idx))) and 0 <= idx[0] and idx[-1] < x.size


@pytest.mark.parametrize(("numel", "k"), [(50, 10), (50, 40)])  # direct and complement selection
def test_randomk_selection_is_uniform(numel, k):
    draws = 4000
    counts = np.zeros(numel)
    for seed in range(draws):
        counts[randomk.positions(seed, numel, k)] += 1
    mean, std = draws * k / numel, math.sqrt(draws * k / numel * (1 - k / numel))
    assert np.all(np.abs(counts - mean) <= 6 * std)


def test_randomk_positions_are_pinned():
    # Only the seed's key bytes (draws.py) are used: these must never change within a wire
    # version, or receivers would place the values elsewhere.
    assert randomk.positions(12345, 100, 5).tolist() == PINNED_12345
    assert randomk.positions(2**64 - 1, 10, 8).tolist() == PINNED_MAX


PINNED_12345 = [25, 34, 48, 62, 70]
PINNED_MAX = [0, 1, 3, 4, 5, 7, 8, 9]


@given(st.integers(0, 2**64 - 1), st.integers(0, 3000), st.data())
@quick
def test_randomk_positions_are_k_distinct_sorted_indices(seed, numel, data):
    k = data.draw(st.integers(0, numel))
    idx = randomk.positions(seed, numel, k)
    assert idx.dtype == np.int64 and idx.size == k
    assert np.all(np.diff(idx) > 0) and (k == 0 or (idx[0] >= 0 and idx[-1] < numel))


@given(arrays(np.uint8, st.integers(1, 600)), st.data())
@quick
def test_randomk_cut_holds_the_m_th_smallest_byte(keys, data):
    m = data.draw(st.integers(0, keys.size))
    cut, below, tied = randomk._below(keys, m)
    assert below == np.count_nonzero(keys < cut) and tied == np.count_nonzero(keys == cut)
    assert below <= m <= below + tied


@given(st.integers(0, 2**64 - 1), st.integers(1, 200), st.data())
@quick
def test_randomk_frames_carry_the_values_at_the_positions_in_order(seed, numel, data):
    # The codec selects 16 positions at a time from the key bytes (lanes.py), a partial
    # last block through padded copies; ``positions`` is the reference, by numpy.
    k = data.draw(st.integers(1, numel))
    x = rand(numel, seed % 1000) + 10
    values = np.empty(k + 16, np.float32)
    randomk._pack(*randomk._selection(seed, numel, k), x, values)
    idx = randomk.positions(seed, numel, k)
    assert np.array_equal(values[:k], x[idx])
    out = np.empty(numel, np.float32)
    randomk._spread(*randomk._selection(seed, numel, k), values[:k], out)
    assert np.array_equal(out[idx], x[idx]) and np.count_nonzero(np.delete(out, idx)) == 0


# --- hypothesis round trips ----------------------------------------------------------------------

def invariant(name: str, codec, frame: bytes, x: np.ndarray, out: np.ndarray) -> None:
    if name in SCALED:
        assert struct.unpack("<I", frame_param_bytes(frame)) == (codec.block,)
    if name == "signsgd":
        scale = per_block(x, codec.block, lambda b: np.abs(b).mean()).astype(np.float32)
        np.testing.assert_allclose(np.abs(out), scale, rtol=1e-6)
        assert np.array_equal((out < 0)[scale > 0], (x < 0)[scale > 0])
    elif name == "terngrad":
        s = per_block(x, codec.block, lambda b: np.abs(b).max()).astype(np.float32)
        assert np.all((out == 0) | (np.abs(out) == s))
        assert np.all(out[x == 0] == 0) and np.array_equal(np.sign(out[out != 0]), np.sign(x[out != 0]))
        assert np.array_equal(out[np.abs(x) == s], x[np.abs(x) == s])  # probability 1
    else:
        seed, k = struct.unpack("<QQ", frame_param_bytes(frame))
        assert k == min(x.size, max(1, math.ceil(codec.ratio * x.size))) if x.size else k == 0
        idx = randomk.positions(seed, x.size, k)
        assert np.array_equal(out[idx], x[idx]) and np.count_nonzero(np.delete(out, idx)) == 0


@given(names, vectors, blocks)
@quick
def test_round_trip(name, x, block):
    codec = get_codec(name, block=block) if name in SCALED else get_codec(name)
    frame = codec.encode(x)
    out = codec.decode(frame, x.size)
    assert out.dtype == np.float32 and out.shape == x.shape and np.isfinite(out).all()
    assert len(frame) == codec.wire_size(x.size)
    invariant(name, codec, frame, x, out)


@given(names, st.integers(0, 2**32), arrays(np.float32, st.integers(0, 300), elements=st.floats(-1, 1, width=32)))
@quick
def test_same_seed_gives_same_frames(name, seed, x):
    params = {} if name == "signsgd" else {"seed": seed}  # signsgd is deterministic
    a, b = get_codec(name, **params), get_codec(name, **params)
    assert [a.encode(x) for _ in range(3)] == [b.encode(x) for _ in range(3)]


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_non_finite_input(name, bad):
    x = np.array([1.0, bad], np.float32)
    if name == "randomk":  # values are sent as they are, like fp32_sparse
        out = decode_any(get_codec(name, ratio=1.0).encode(x))
        assert out[0] == 1.0 and not np.isfinite(out[1])
    else:
        with pytest.raises(CodecError, match="must be finite"):
            get_codec(name).encode(x)


# --- exact wire sizes ----------------------------------------------------------------------------

SIZES = [0, 1, 2, 7, 8, 9, 15, 16, 17, 99, 100, 101, 4095, 65537, 1000003]


def expected_size(name: str, n: int, ratio: float = 0.5, block: int | None = None) -> int:
    block = block or DEFAULT_BLOCK.get(name)
    if name == "signsgd":
        return HEADER + 4 + 4 * math.ceil(n / block) + math.ceil(n / 8)
    if name == "terngrad":
        return HEADER + 4 + 4 * math.ceil(n / block) + 2 * math.ceil(n / 8)
    return HEADER + 16 + 4 * (min(n, max(1, math.ceil(ratio * n))) if n else 0)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("n", SIZES)
def test_exact_wire_size(name, n):
    codec = get_codec(name)
    assert len(codec.encode(rand(n))) == codec.wire_size(n) == expected_size(name, n)


@given(names, st.integers(0, 20000), st.floats(0.001, 1.0), blocks)
@quick
def test_wire_size_formula(name, n, ratio, block):
    codec = get_codec(name, ratio=ratio) if name == "randomk" else get_codec(name, block=block)
    assert codec.wire_size(n) == expected_size(name, n, ratio, block)
    if name in SCALED and n <= 5000:
        assert len(codec.encode(rand(n))) == codec.wire_size(n)


def test_wire_ratio_for_the_mnist_cnn_vector():
    n = 1_663_370
    ratios = {name: get_codec(name).wire_size(n) / (4 * n) for name in NEW}
    assert ratios["signsgd"] == pytest.approx(1 / 32 + 1 / 64, rel=1e-3)
    assert ratios["terngrad"] == pytest.approx(1 / 16 + 1 / 1024, rel=1e-3)
    assert ratios["randomk"] == pytest.approx(0.5, rel=1e-3)


# --- randomk seeds -------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.7, 1.0])  # 0.7: the subset's complement
def test_randomk_receiver_regenerates_the_sender_indices(ratio):
    x = rand(100_000, 4)
    frame = get_codec("randomk", ratio=ratio).encode(x)
    seed, k = struct.unpack("<QQ", frame_param_bytes(frame))
    sent = randomk.positions(seed, x.size, k)
    assert sent.size == k == round(ratio * x.size)
    assert np.array_equal(np.frombuffer(frame, "<f4", offset=len(frame) - 4 * k), x[sent])
    out = get_codec("randomk", ratio=0.01).decode(frame, x.size)  # a fresh receiver, another ratio and seed
    assert np.array_equal(out[sent], x[sent]) and np.count_nonzero(out) == k


def test_randomk_successive_frames_use_different_seeds_and_indices():
    codec, x = get_codec("randomk", ratio=0.1), rand(10_000) + 10
    frames = [codec.encode(x) for _ in range(5)]
    seeds = [struct.unpack("<QQ", frame_param_bytes(f))[0] for f in frames]
    assert len(set(seeds)) == 5
    kept = [np.flatnonzero(decode_any(f)).tolist() for f in frames]
    assert all(a != b for a, b in zip(kept, kept[1:]))
    # Seeded: a second encoder with the same seed repeats the same frames, another seed does not.
    assert [get_codec("randomk", ratio=0.1).encode(x) for _ in range(1)] == frames[:1]
    assert get_codec("randomk", ratio=0.1, seed=1).encode(x) != frames[0]


@pytest.mark.parametrize("name", SCALED)
def test_frame_numel_must_match_the_receiver(name):
    frame = get_codec(name).encode(rand(20))
    with pytest.raises(CodecError, match="frame has 20 elements, expected 21"):
        get_codec(name).decode(frame, numel=21)
    # A decoder with another default block reads the block size from the frame.
    assert np.array_equal(get_codec(name, block=3).decode(frame, 20), decode_any(frame))
    vals = np.array([5.0, 6.0], "<f4").tobytes()
    out = decode_any(wire.build(9, 10, struct.pack("<QQ", 42, 2), [vals]))
    assert out[randomk.positions(42, 10, 2)].tolist() == [5, 6] and np.count_nonzero(out) == 2


def test_constructor_parameters():
    assert get_codec("randomk", ratio=0.25, seed=5).ratio == 0.25
    with pytest.raises(CodecError, match="ratio"):
        get_codec("randomk", ratio=0.0)
    with pytest.raises(CodecError, match="bad parameters"):
        get_codec("signsgd", seed=1)
    assert get_codec("randomk").ratio == 0.5
    assert {name: get_codec(name).block for name in SCALED} == DEFAULT_BLOCK
    for name in SCALED:
        assert get_codec(name, block=2**31).block == 2**31
        for bad in (0, -1, 2**31 + 1, 2.5):
            with pytest.raises(CodecError, match="block size must be an integer"):
                get_codec(name, block=bad)
    assert [get_codec(n).lossy for n in NEW] == [True, True, True]
