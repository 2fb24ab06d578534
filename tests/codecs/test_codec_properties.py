"""Property tests for every codec: round trips, error bounds, unbiasedness, exact wire sizes."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from commlab.codecs import CodecError, decode_any, get_codec, wire
from commlab.codecs import bitpack, indices, topk

HEADER = wire.HEADER.size
F32_EPS = float(np.finfo(np.float32).eps)
TINY = float(np.float32(1e-37))  # 127 / TINY overflows float32
# A scale below the float32 normal range is itself rounded to a multiple of 2**-149.
SUBNORMAL_SLACK = 255 * 2.0**-149

finite = st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False)
vectors = arrays(np.float32, st.integers(0, 300), elements=finite)
nonempty = arrays(np.float32, st.integers(1, 300), elements=finite)
any_float32 = arrays(np.float32, st.integers(0, 100), elements=st.floats(width=32))

PROPERTY = settings(max_examples=60)
# A numpy overflow/invalid warning inside a codec means a wrong value was computed somewhere.
pytestmark = pytest.mark.filterwarnings("error")


def roundtrip(codec, vec):
    frame = codec.encode(vec)
    out = decode_any(frame)
    assert out.dtype == np.float32 and out.shape == vec.shape
    return frame, out


@given(any_float32)
@PROPERTY
def test_fp32_is_bit_exact_including_nan_and_inf(vec):
    frame, out = roundtrip(get_codec("fp32"), vec)
    assert out.view(np.uint32).tolist() == vec.view(np.uint32).tolist()
    assert len(frame) == get_codec("fp32").wire_size(vec.size) == HEADER + 4 * vec.size


@given(vectors, st.integers(1, 64))
@PROPERTY
def test_int8_error_within_half_a_step_and_size_formula(vec, chunk):
    codec = get_codec("int8", chunk=chunk)
    frame, out = roundtrip(codec, vec)
    nchunks = math.ceil(vec.size / chunk)
    assert len(frame) == codec.wire_size(vec.size) == HEADER + 4 + 4 * nchunks + vec.size
    for c in range(nchunks):
        part = slice(c * chunk, (c + 1) * chunk)
        amax = float(np.abs(vec[part]).max())
        step = amax / 127
        assert np.all(np.abs(out[part] - vec[part]) <= step / 2 + 4 * F32_EPS * amax + SUBNORMAL_SLACK)


def test_int8_default_chunk_size_is_about_d_plus_4d_over_c():
    vec = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    assert len(get_codec("int8").encode(vec)) == HEADER + 4 + 100_000 + 4 * math.ceil(100_000 / 8192)


@pytest.mark.parametrize("name", ["int8", "int8_sparse", "minmax4", "qsgd4"])
@pytest.mark.parametrize("bad", [np.inf, np.nan, 3e38])
def test_lossy_codecs_reject_values_they_cannot_represent(name, bad):
    with pytest.raises(CodecError, match="must be finite"):
        get_codec(name).encode(np.array([1.0, bad], np.float32))


@given(arrays(np.float32, st.integers(1, 50), elements=st.floats(-TINY, TINY, width=32)))
@example(np.array([190 * 2.0**-149], np.float32))  # the scale rounds down: w/s is 190
@PROPERTY
def test_int8_handles_subnormal_chunks(vec):
    _, out = roundtrip(get_codec("int8", chunk=8), vec)
    amax = float(np.abs(vec).max())
    assert np.all(np.abs(out - vec) <= amax / 254 + SUBNORMAL_SLACK)


def kept_and_dropped(vec, out):
    kept = out != 0
    return np.abs(vec[kept]), np.abs(vec[~kept])


@given(nonempty, st.floats(0.01, 1.0))
@PROPERTY
def test_fp32_sparse_keeps_exact_top_k(vec, ratio):
    codec = get_codec("fp32_sparse", ratio=ratio)
    frame, out = roundtrip(codec, vec)
    k = min(vec.size, max(1, math.ceil(ratio * vec.size)))
    nonzero_kept = np.count_nonzero(out)
    assert nonzero_kept <= k
    assert np.array_equal(out[out != 0], vec[out != 0])  # kept values are exact
    kept, dropped = kept_and_dropped(vec, out)
    if kept.size and dropped.size:
        assert kept.min() >= dropped.max() or np.count_nonzero(vec) <= k
    mode, coded = indices.encode(topk.select(vec, ratio)[0], vec.size)
    assert len(frame) == HEADER + 17 + coded.size + 4 * k <= codec.wire_size(vec.size)


@given(vectors)
@PROPERTY
def test_fp32_sparse_with_ratio_one_is_lossless(vec):
    _, out = roundtrip(get_codec("fp32_sparse", ratio=1.0), vec)
    assert np.array_equal(out, vec)


@given(nonempty, st.floats(0.05, 1.0), st.integers(1, 16))
@PROPERTY
def test_int8_sparse_error_on_kept_values(vec, ratio, chunk):
    codec = get_codec("int8_sparse", ratio=ratio, chunk=chunk)
    frame, out = roundtrip(codec, vec)
    ref = get_codec("fp32_sparse", ratio=ratio).encode(vec)
    top = decode_any(ref)
    kept_vals = top[top != 0] if np.count_nonzero(top) else top[:0]
    amax = float(np.abs(vec).max())
    # Every error is bounded by half the largest chunk step plus float slack.
    assert np.all(np.abs(out - top) <= amax / 254 + 4 * F32_EPS * amax + SUBNORMAL_SLACK)
    k = min(vec.size, max(1, math.ceil(ratio * vec.size)))
    assert len(frame) <= codec.wire_size(vec.size)
    assert len(frame) - (len(ref) - 4 * k) == 4 + 4 * math.ceil(k / chunk) + k  # same indices, int8 values
    assert kept_vals.size <= k


def test_sparse_sizes_at_ten_percent_density_meet_targets():
    vec = np.random.default_rng(1).standard_normal(1_000_000).astype(np.float32)
    assert len(get_codec("int8_sparse").encode(vec)) <= 0.06 * vec.nbytes
    assert len(get_codec("fp32_sparse").encode(vec)) <= 0.13 * vec.nbytes


def minmax_head(frame: bytes, nchunks: int) -> np.ndarray:
    """The (min, scale) float32 pairs of a minmax frame, one row per chunk."""
    return np.frombuffer(frame, "<f4", 2 * nchunks, HEADER + 5).reshape(nchunks, 2)


@given(vectors, st.integers(1, 8), st.integers(1, 64))
@example(np.array([-(2.0**126), 2.0**126], np.float32), 2, 2)  # the widest range: scale rounds up
@example(np.array([0.0, 190 * 2.0**-149, 3 * 2.0**-149], np.float32), 8, 3)  # subnormal scale
@example(np.array([1e-45, 0.0, 5.0, 5.0, -3.0], np.float32), 1, 2)  # constant chunk: scale 0
@PROPERTY
def test_minmax_error_within_half_a_step_per_chunk_and_size_formula(vec, bits, chunk):
    codec = get_codec(f"minmax{bits}", chunk=chunk)
    frame, out = roundtrip(codec, vec)
    nchunks = math.ceil(vec.size / chunk)
    assert len(frame) == codec.wire_size(vec.size) == HEADER + 5 + 8 * nchunks + math.ceil(vec.size * bits / 8)
    head = minmax_head(frame, nchunks)
    for c in range(nchunks):
        part = slice(c * chunk, (c + 1) * chunk)
        lo, hi = float(vec[part].min()), float(vec[part].max())
        scale = float(np.float32((hi - lo) / (2**bits - 1)))  # float reference of this chunk's header
        assert head[c].tolist() == [lo, scale]
        err = np.abs(out[part].astype(np.float64) - vec[part])
        assert np.all(err <= scale / 2 + 8 * F32_EPS * max(abs(lo), abs(hi)) + SUBNORMAL_SLACK)


@pytest.mark.parametrize("numel", [0, 1, 7, 8191, 8192, 8193, 1_000_003])
@pytest.mark.parametrize(("bits", "chunk"), [(2, None), (8, None), (3, 1), (5, 1000), (1, 2**32 - 1)])
def test_minmax_exact_wire_size(numel, bits, chunk):
    codec = get_codec(f"minmax{bits}", **({} if chunk is None else {"chunk": chunk}))
    chunk = chunk or (256 if bits <= 2 else 8192)  # the default: finer chunks for 1-2 bits
    assert codec.chunk == chunk
    vec = np.random.default_rng(numel).standard_normal(numel).astype(np.float32)
    frame, out = roundtrip(codec, vec)
    expected = HEADER + 5 + 8 * math.ceil(numel / chunk) + math.ceil(bits * numel / 8)
    assert len(frame) == codec.wire_size(numel) == expected
    if numel:  # the frame carries its chunk: a receiver with another default decodes it
        assert np.array_equal(get_codec(f"minmax{bits}", chunk=3).decode(frame, numel=numel), out)
        step = minmax_head(frame, math.ceil(numel / chunk))[:, 1].max()
        assert np.abs(out - vec).max() <= step / 2 + 8 * F32_EPS * np.abs(vec).max()


def test_minmax_chunks_keep_the_error_relative_to_the_chunk():
    # One outlier must not set the step of the whole vector (the single min/max failure mode).
    vec = (np.random.default_rng(2).standard_normal(4 * 8192) * 1e-3).astype(np.float32)
    vec[5] = 0.5
    out = decode_any(get_codec("minmax2").encode(vec))
    rest = slice(8192, None)
    step = (vec[rest].max() - vec[rest].min()) / 3
    assert np.abs(out[rest] - vec[rest]).max() <= step / 2 * (1 + 1e-5)
    assert step < 0.05 * 0.5 / 3  # a global step would be about (0.5 - min) / 3
    assert np.abs(out[:8192] - vec[:8192]).max() <= 0.51 / 6


@given(st.sampled_from(bitpack._WORD_WIDTHS), st.data())
@PROPERTY
def test_bitpack_fields_are_the_levels_at_bits_times_their_place(bits, data):
    # _fields joins each word's 8 byte levels in pairs, pairs of pairs, then halves; the reference
    # shifts each level to bit bits * t. _bytes_of_fields undoes it and flags a level above the limit.
    levels = data.draw(arrays(np.uint8, 8 * data.draw(st.integers(1, 20)), elements=st.integers(0, 2**bits - 1)))
    groups = np.empty(levels.size // 8, np.uint64)
    bitpack._fields(levels.view(np.uint64), bits, groups)
    places = np.arange(8, dtype=np.uint64) * np.uint64(bits)
    expected = np.bitwise_or.reduce(levels.reshape(-1, 8).astype(np.uint64) << places, axis=1)
    assert np.array_equal(groups, expected)
    back = np.empty(groups.size, np.uint64)
    limit = data.draw(st.integers(0, 2**bits - 1))
    assert bitpack._bytes_of_fields(groups, bits, back, limit) == (levels > limit).any()
    assert np.array_equal(back.view(np.uint8), levels)


@given(st.sampled_from(bitpack._WORD_WIDTHS + (2, 4, 8)), st.integers(1, 300), st.data())
@PROPERTY
def test_bitpack_rejects_the_largest_level_above_the_maximum(bits, count, data):
    values = np.array(data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=count, max_size=count)), np.uint8)
    max_level = data.draw(st.integers(0, 2**bits - 1))
    stream = bitpack.reference_pack(values, bits)
    for dtype in (np.uint8, np.float32):
        if values.max() > max_level:
            with pytest.raises(CodecError, match=f"level {values.max()} exceeds the {max_level} levels"):
                bitpack.unpack_levels(stream, count, bits, max_level=max_level, dtype=dtype)
        else:
            assert np.array_equal(bitpack.unpack_levels(stream, count, bits, max_level=max_level, dtype=dtype), values)


@given(st.integers(1, 8), st.integers(0, 100), st.data())
@PROPERTY
def test_bitpack_round_trip_matches_the_reference(bits, count, data):
    values = np.array(data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=count, max_size=count)), np.uint8)
    stream = bitpack.pack(values, bits)
    assert stream.size == math.ceil(count * bits / 8)
    assert np.array_equal(stream, bitpack.reference_pack(values, bits))
    assert np.array_equal(bitpack.pack(values.astype(np.float32), bits), stream)
    padded = np.zeros(count + data.draw(st.integers(0, 40)), np.float32)  # zero tail past count
    padded[:count] = values
    assert np.array_equal(bitpack.pack(padded, bits, count), stream)
    levels = bitpack.unpack_levels(stream, count, bits)
    assert levels.dtype == np.float32 and np.array_equal(levels, bitpack.reference_unpack(stream, count, bits))
    assert np.array_equal(levels, values)


@given(st.integers(1, 8), st.integers(0, 300), st.integers(0, 7), st.data())
@PROPERTY
def test_bitpack_unpacks_streams_at_any_byte_offset(bits, count, offset, data):
    # Frames put the packed levels at any byte offset: the stream's words are read where they lie.
    values = np.array(data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=count, max_size=count)), np.uint8)
    packed = bitpack.reference_pack(values, bits)
    buffer = np.zeros(offset + packed.size + 8, np.uint8)
    buffer[offset : offset + packed.size] = packed
    stream = buffer[offset : offset + packed.size]
    levels = bitpack.unpack_levels(stream, count, bits, max_level=2**bits - 1, dtype=np.uint8)
    assert np.array_equal(levels, bitpack.reference_unpack(packed, count, bits))
    assert np.array_equal(bitpack.unpack_levels(stream, count, bits), values.astype(np.float32))


@pytest.mark.parametrize("bits", range(1, 9))
def test_bitpack_rejects_padding_bits_and_levels_above_the_maximum(bits):
    stream = bitpack.pack(np.array([1, 0, 1], np.uint8), bits)
    if 3 * bits % 8:
        bad = stream.copy()
        bad[-1] |= 0x80
        with pytest.raises(CodecError, match="non-zero padding bits"):
            bitpack.unpack_levels(bad, 3, bits)
    with pytest.raises(CodecError, match="3 values of"):
        bitpack.unpack_levels(stream[:-1], 3, bits)
    with pytest.raises(CodecError, match="level 1 exceeds the 0 levels"):
        bitpack.unpack_levels(stream, 3, bits, max_level=0)


@given(st.integers(1, 5000), st.data())
@PROPERTY
def test_index_coding_round_trip_picks_smaller_form(numel, data):
    chosen = data.draw(st.sets(st.integers(0, numel - 1), max_size=min(numel, 600)))
    idx = np.array(sorted(chosen), np.int64)
    mode, coded = indices.encode(idx, numel)
    assert np.array_equal(indices.decode(mode, coded, numel, idx.size), idx)
    masks = indices.decode_masks(mode, coded, numel, idx.size)  # bit j of mask b: position 16 b + j
    assert masks.size == -(-numel // 16)
    assert np.array_equal(np.flatnonzero(np.unpackbits(masks.view(np.uint8), bitorder="little")), idx)
    varint = sum(indices.varint_len(d) for d in np.diff(idx, prepend=0))
    assert coded.size == min(varint, math.ceil(numel / 8))
    assert coded.size <= indices.bound(numel, idx.size)


@given(st.sampled_from([indices.VARINT, indices.BITMAP, 7]), arrays(np.uint8, st.integers(0, 40)),
       st.integers(1, 300), st.integers(0, 40))
@PROPERTY
def test_index_masks_refuse_what_the_positions_refuse(mode, data, numel, k):
    # Untrusted index bytes: decode_masks raises exactly where decode does, with its message.
    def outcome(decode):
        try:
            return decode(mode, data, numel, k)
        except CodecError as e:
            return str(e)
    positions, masks = outcome(indices.decode), outcome(indices.decode_masks)
    if isinstance(positions, str):
        assert masks == positions
    else:
        assert np.array_equal(np.flatnonzero(np.unpackbits(masks.view(np.uint8), bitorder="little")), positions)


@given(st.sets(st.integers(0, 2**31 - 1), max_size=200), st.sampled_from([np.int32, np.int64]))
@PROPERTY
def test_varints_of_any_deltas_round_trip(chosen, dtype):
    # Deltas of every length, 1 to 5 bytes, from int32 positions (topk's) and int64 ones.
    idx = np.array(sorted(chosen), dtype)
    mode, coded = indices.encode(idx, 2**31)
    assert mode == indices.VARINT
    assert coded.size == sum(indices.varint_len(d) for d in np.diff(idx.astype(np.int64), prepend=0))
    assert np.array_equal(indices.decode(mode, coded, 2**31, idx.size), idx)


def _runs(small: st.SearchStrategy, other: st.SearchStrategy) -> st.SearchStrategy:
    """Lists of runs of 16 or more ``small`` (what the varint loops take 16 at a time) between a few ``other``."""
    run = st.one_of(st.lists(small, min_size=16, max_size=40), st.lists(other, max_size=3))
    return st.lists(run, max_size=10).map(lambda runs: [x for r in runs for x in r])


@given(_runs(st.integers(1, 127), st.integers(1, 2**22)))
@PROPERTY
def test_varints_are_the_leb128_of_the_deltas(deltas):
    # Runs of 16 one-byte deltas (written and read 16 at a time) between longer ones; masks and
    # positions decoded from them alike.
    idx = (np.cumsum(np.array(deltas, np.int64)) - 1).astype(np.int32)
    expected = bytearray()
    for delta in np.diff(idx.astype(np.int64), prepend=0).tolist():
        while delta >= 0x80:
            expected.append((delta & 0x7F) | 0x80)
            delta >>= 7
        expected.append(delta)
    mode, coded = indices.encode(idx, 2**31)
    assert mode == indices.VARINT and coded.tobytes() == bytes(expected)
    numel = int(idx[-1]) + 1 if idx.size else 1
    assert np.array_equal(indices.decode(mode, coded, numel, idx.size), idx)
    masks = indices.decode_masks(mode, coded, numel, idx.size)
    assert np.array_equal(np.flatnonzero(np.unpackbits(masks.view(np.uint8), bitorder="little")), idx)


def reference_varints(data: bytes, numel: int) -> list[int] | str:
    """LEB128 deltas read one byte at a time: the positions, or the first kind of error decode reports."""
    positions, errors, delta, shift, length, total = [], set(), 0, 0, 0, 0
    for byte in data:
        delta, shift, length = delta | (byte & 0x7F) << shift, shift + 7, length + 1
        if byte < 0x80:
            if length > 5:
                errors.add("longer than")
            elif delta >= numel or (positions and delta == 0):
                errors.add("not strictly increasing")
            else:
                total += delta
            positions.append(total)
            delta, shift, length = 0, 0, 0
    if positions and total >= numel:
        errors.add("out of range for")
    order = ["longer than", "not strictly increasing", "out of range for"]
    return next((e for e in order if e in errors), positions)


def _spoilt(run: list[int], at: int, byte: int | None) -> list[int]:
    return run if byte is None else run[:at % len(run)] + [byte] + run[at % len(run):]


@given(st.lists(st.builds(_spoilt, st.lists(st.integers(1, 127), min_size=16, max_size=40), st.integers(0, 39),
                          st.sampled_from([None, 0, 0x80, 0xFF, 0x81])), max_size=8).map(lambda runs: sum(runs, [])),
       st.one_of(st.integers(1, 1 << 14), st.just(1 << 20)))
@settings(max_examples=200)
def test_untrusted_varints_decode_as_one_byte_at_a_time(body, numel):
    # Untrusted bytes whose runs of one-byte deltas the decoders take 16 at a time: a zero delta,
    # an overlong value or a position past the vector inside or beside such a run is refused as
    # the byte-by-byte reading refuses it, and otherwise both decoders give its positions.
    data = np.array(body + [1], np.uint8)
    k = int(np.count_nonzero(data < 0x80))
    expected = reference_varints(data.tobytes(), numel)
    for decode in (indices.decode, indices.decode_masks):
        if isinstance(expected, str):
            with pytest.raises(CodecError, match=expected):
                decode(indices.VARINT, data, numel, k)
        else:
            got = decode(indices.VARINT, data, numel, k)
            if decode is indices.decode_masks:
                got = np.flatnonzero(np.unpackbits(got.view(np.uint8), bitorder="little"))
            assert np.array_equal(got, expected)


def bucket_norms(vec: np.ndarray, bucket: int) -> np.ndarray:
    """Per-element norm of the element's bucket, float64."""
    x = vec.astype(np.float64)
    norms = [np.linalg.norm(x[a : a + bucket]) for a in range(0, x.size, bucket)]
    return np.repeat(norms, bucket)[: x.size]


@given(arrays(np.float32, st.integers(1, 40), elements=st.floats(-10, 10, width=32)), st.integers(1, 16),
       st.integers(1, 16))
@settings(max_examples=8)
def test_qsgd_is_unbiased_per_bucket(vec, levels, bucket):
    codec = get_codec(f"qsgd{levels}", bucket=bucket, seed=0)
    draws = 1000
    norm = bucket_norms(vec, bucket)
    # 1000 draws in one frame: copies of vec, each zero-padded to whole buckets, so every copy's
    # buckets have vec's norms and every value gets its own independent draw.
    padded = np.zeros(-(-vec.size // bucket) * bucket, np.float32)
    padded[:vec.size] = vec
    out = decode_any(codec.encode(np.tile(padded, draws))).reshape(draws, -1)[:, :vec.size]
    # Each value moves by less than one step of its own bucket's norm / levels.
    assert np.all(np.abs(out - vec) <= norm / levels * (1 + 1e-5) + 1e-6)
    # Per-element error of one draw lies in an interval of width norm/levels: std <= norm/(2 levels).
    tol = 6 * norm / (2 * levels * math.sqrt(draws)) + 1e-5 * (norm + 1)
    assert np.all(np.abs(out.astype(np.float64).mean(axis=0) - vec) <= tol)


def test_qsgd_buckets_keep_the_error_relative_to_the_bucket():
    # One large bucket must not drown the small values of another (the single-norm failure mode).
    vec = np.concatenate([np.full(512, 1000.0), np.full(512, 1e-3)]).astype(np.float32)
    out = decode_any(get_codec("qsgd4", seed=0).encode(vec))
    assert np.abs(out[512:] - vec[512:]).max() <= np.linalg.norm(vec[512:]) / 4 * (1 + 1e-5)
    cnn_like = np.random.default_rng(0).standard_normal(200_000).astype(np.float32)
    rel = np.linalg.norm(decode_any(get_codec("qsgd16", seed=0).encode(cnn_like)) - cnn_like) / np.linalg.norm(cnn_like)
    assert rel < 1.0  # a single norm gives about sqrt(D)/levels = 28 here


@given(vectors, st.integers(1, 255), st.integers(1, 600))
@example(np.array([9.890723e-39], np.float32), 4, 512)  # levels / norm overflows float32
@example(np.array([1e-45, 3e-45, 0.0], np.float32), 255, 2)  # subnormal bucket norms
@PROPERTY
def test_qsgd_size_formula_and_seeded_reproducibility(vec, levels, bucket):
    codec = get_codec(f"qsgd{levels}", bucket=bucket, seed=7)
    frame = codec.encode(vec)
    assert frame == get_codec(f"qsgd{levels}", bucket=bucket, seed=np.random.default_rng(7)).encode(vec)
    bits = levels.bit_length()
    expected = (HEADER + 5 + 4 * math.ceil(vec.size / bucket) + math.ceil(vec.size / 8)
                + math.ceil(vec.size * bits / 8))
    assert len(frame) == codec.wire_size(vec.size) == expected
    out = decode_any(frame)
    # The float32 step norm/levels is rounded to the subnormal grid for tiny norms.
    assert np.all(np.abs(out - vec) <= bucket_norms(vec, bucket) / levels * (1 + 1e-5) + SUBNORMAL_SLACK)


@given(vectors, st.integers(1, 255), st.integers(1, 600))
@example(np.zeros(1000, np.float32), 3, 512)
@PROPERTY
def test_qsgdz_sends_qsgds_levels_in_at_most_its_bound(vec, levels, bucket):
    fixed = get_codec(f"qsgd{levels}", bucket=bucket, seed=7).encode(vec)
    coded = get_codec(f"qsgdz{levels}", bucket=bucket, seed=7)
    frame = coded.encode(vec)
    assert np.array_equal(decode_any(frame), decode_any(fixed))  # same draws, same vector
    # The bound is a DENSE frame: qsgd's payload under qsgdz's 8 bytes longer parameters.
    assert len(frame) <= coded.wire_size(vec.size) == len(fixed) + 8
    if frame[HEADER + 5] == 1:  # DENSE: qsgd's payload byte for byte
        assert frame[HEADER + frame[7]:] == fixed[HEADER + fixed[7]:]


def test_qsgdz_frames_shrink_with_the_zero_levels():
    # A bucket of 512 normal values has most of its 3-level levels at 0: the coded frame is well
    # under half the fixed-width one (measured on an MNIST CNN update: 0.23x at 2 bits).
    vec = np.random.default_rng(0).standard_normal(512 * 200).astype(np.float32)
    fixed, coded = (len(get_codec(f"{name}3", seed=0).encode(vec)) for name in ("qsgd", "qsgdz"))
    assert coded < 0.5 * fixed


def test_random_codecs_draw_from_the_nodes_seed():
    """Two runs of one seed draw the same (build_compression seeds the codec with the node's codec
    seed, commlab.runs.seeds), two nodes draw differently, and a seed in the params wins."""
    from commlab.codecs.compression import build_compression
    vec = np.random.default_rng(0).standard_normal(5000).astype(np.float32)

    def frame(name, params, seed):
        return build_compression(name, params, [], seed=seed).codec.encode(vec)
    for name in ("qsgd3", "qsgdz3", "terngrad", "randomk"):
        assert frame(name, {}, 1) == frame(name, {}, 1) != frame(name, {}, 2)
        assert frame(name, {"seed": 7}, 1) == frame(name, {"seed": 7}, 2)


def test_get_codec_names_and_bad_parameters():
    assert get_codec("minmax4").name == "minmax4" and get_codec("qsgd16").levels == 16
    assert [get_codec(n).lossy for n in ("fp32", "int8", "fp32_sparse", "int8_sparse")] == [False, True, True, True]
    with pytest.raises(CodecError, match="unknown codec 'int4'"):
        get_codec("int8".replace("8", "4"))
    with pytest.raises(CodecError, match="bad parameters"):
        get_codec("int8", ratio=0.1)
    for bad in ("minmax0", "minmax9", "qsgd0", "qsgd256"):
        with pytest.raises(CodecError):
            get_codec(bad)
    for bucket in (0, 2**32, 1.5):
        with pytest.raises(CodecError, match="qsgd bucket"):
            get_codec("qsgd4", bucket=bucket)
    for chunk in (0, -1, 2**32, 1.5, "8"):
        with pytest.raises(CodecError, match="minmax chunk"):
            get_codec("minmax4", chunk=chunk)
    with pytest.raises(CodecError, match="ratio"):
        get_codec("fp32_sparse", ratio=0.0)


def test_encode_rejects_matrices():
    with pytest.raises(CodecError, match="flat vector"):
        get_codec("fp32").encode(np.zeros((2, 2), np.float32))
