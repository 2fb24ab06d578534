"""Decoders facing untrusted bytes: every malformed frame raises CodecError and nothing else,
without huge allocations; plus the error-feedback memory."""
from __future__ import annotations

import os
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.codecs import CodecError, ErrorFeedback, bitpack, decode_any, get_codec, wire
from commlab.codecs.compression import build_compression

# COMMLAB_FUZZ_CASES: `make fuzz` runs 10,000 cases per test, `make test` a 1,000-case smoke.
settings.register_profile("codecs-fuzz", max_examples=int(os.environ.get("COMMLAB_FUZZ_CASES", "1000")), deadline=None)
settings.load_profile("codecs-fuzz")
# A numpy warning (overflow, invalid cast) inside a decoder means a silently wrong vector.
pytestmark = pytest.mark.filterwarnings("error")

CODECS = ["fp32", "int8", "fp32_sparse", "int8_sparse", "minmax3", "minmax8", "qsgd1", "qsgd16", "qsgdz3",
          "qsgdz255"]
CAP = 1 << 16  # decoders in these tests may produce at most 256 KiB


def valid_frames() -> list[bytes]:
    rng = np.random.default_rng(3)
    frames = []
    for name in CODECS:
        params = {"seed": 0, "bucket": 32} if name.startswith("qsgd") else {}
        if "int8" in name or name.startswith("minmax"):
            params["chunk"] = 16
        for vec in (rng.standard_normal(100).astype(np.float32), np.zeros(3, np.float32), np.zeros(0, np.float32)):
            frames.append(get_codec(name, **params).encode(vec))
    # A bitmap-coded sparse frame too (dense selection makes the bitmap smaller than varints).
    frames.append(get_codec("fp32_sparse", ratio=0.9).encode(rng.standard_normal(200).astype(np.float32)))
    return frames


FRAMES = valid_frames()


def decode_only_codec_error(frame) -> None:
    """Decoding either succeeds with a sane vector or raises CodecError; allocations stay small."""
    tracemalloc.start()
    try:
        out = decode_any(frame, max_numel=CAP)
    except CodecError:
        out = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 64 * CAP + 64 * len(frame) + (1 << 20), f"peak allocation {peak} bytes"
    if out is not None:
        assert out.dtype == np.float32 and out.ndim == 1 and out.size <= CAP


@given(st.binary(max_size=200))
def test_random_bytes(data):
    decode_only_codec_error(data)


@given(st.sampled_from([*range(7), 12]), st.binary(max_size=120))
def test_random_bytes_after_a_valid_header_prefix(codec_id, tail):
    head = wire.MAGIC + bytes([wire.VERSION, codec_id, wire.DTYPE_FLOAT32])
    decode_only_codec_error(head + tail)


@given(st.sampled_from(FRAMES), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_bytes(frame, edits):
    buf = bytearray(frame)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    decode_only_codec_error(bytes(buf))


@given(st.sampled_from(FRAMES), st.sampled_from([8, 16]), st.integers(0, 2**64 - 1))
def test_header_lengths_overwritten(frame, offset, value):
    buf = bytearray(frame)
    struct.pack_into("<Q", buf, offset, value)
    decode_only_codec_error(bytes(buf))


@given(st.sampled_from(FRAMES), st.integers(0, 64), st.binary(max_size=16))
def test_truncated_or_extended(frame, cut, extra):
    decode_only_codec_error(frame[: max(0, len(frame) - cut)] + extra)


@given(st.sampled_from(FRAMES))
def test_valid_frames_still_decode(frame):
    decode_only_codec_error(frame)
    assert decode_any(frame).size == struct.unpack_from("<Q", frame, 8)[0]


def frame_with(codec: str, vec: np.ndarray, **fields) -> bytes:
    """Re-pack a valid frame with some header fields replaced (lengths kept consistent)."""
    frame = get_codec(codec).encode(vec)
    magic, version, cid, dtype, plen, numel, paylen = wire.HEADER.unpack_from(frame)
    values = dict(magic=magic, version=version, cid=cid, dtype=dtype, plen=plen, numel=numel, paylen=paylen)
    values.update(fields)
    body = fields.pop("body", frame[wire.HEADER.size :])
    return wire.HEADER.pack(*(values[k] for k in ("magic", "version", "cid", "dtype", "plen", "numel", "paylen"))) + body


VEC = np.arange(1, 11, dtype=np.float32)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "truncated"),
        (frame_with("fp32", VEC, magic=b"XXXX"), "bad magic"),
        (frame_with("fp32", VEC, version=9), "wire version 9"),
        (frame_with("fp32", VEC, dtype=2), "dtype"),
        (frame_with("fp32", VEC, cid=99), "unknown codec id 99"),
        (frame_with("fp32", VEC, numel=2**40), "exceeds the cap"),
        (frame_with("fp32", VEC, numel=2**31), "need 8589934592"),
        (frame_with("fp32", VEC) + b"\0", "oversized"),
        (frame_with("fp32", VEC)[:-1], "truncated"),
        (frame_with("fp32", VEC, numel=11), "payload 40 bytes"),
        (frame_with("int8", VEC, numel=2**31 - 1), "need"),
    ],
)
def test_specific_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def sparse_frame(idx_bytes: bytes, k: int, numel: int = 10, mode: int = 0) -> bytes:
    params = struct.pack("<QBQ", k, mode, len(idx_bytes))
    return wire.build(3, numel, params, [idx_bytes, np.ones(k, np.float32)])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (sparse_frame(bytes([3, 0]), 2), "not strictly increasing"),
        (sparse_frame(bytes([3, 7]), 2), "out of range"),
        (sparse_frame(bytes([0x83]), 1), "complete values"),
        (sparse_frame(bytes([0x80] * 5 + [1]), 1), "longer than 5"),
        (sparse_frame(bytes([1, 2]), 11), "11 kept values for only 10"),
        (sparse_frame(bytes([0x01, 0x04]), 1, mode=1), "bits set past the end"),
        (sparse_frame(bytes([1]), 1, mode=7), "unknown index coding mode 7"),
    ],
)
def test_sparse_index_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def test_non_finite_scales_are_rejected():
    frame = bytearray(get_codec("int8", chunk=4).encode(VEC))
    struct.pack_into("<f", frame, wire.HEADER.size + 4, float("nan"))
    with pytest.raises(CodecError, match="scales must be finite"):
        decode_any(bytes(frame))


def qsgd_frame(norms, numel: int = 4, levels: int = 1, bucket: int = 2, q: int = 0) -> bytes:
    """A qsgd frame with the given bucket norms, no signs and every level equal to q."""
    packed = bitpack.pack(np.full(numel, q, np.uint8), max(1, levels.bit_length()))
    params = struct.pack("<BI", levels, bucket)
    return wire.build(6, numel, params, [np.asarray(norms, "<f4"), np.zeros(-(-numel // 8), np.uint8), packed])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (qsgd_frame([1.0, float("nan")]), "bucket norms must be finite"),
        (qsgd_frame([float("inf"), 1.0]), "bucket norms must be finite"),
        (qsgd_frame([1.0, -1.0]), "non-negative"),
        (qsgd_frame([1.0, 2.0**127]), "<= 8.50706e\\+37"),
        (qsgd_frame([1.0]), "payload 6 bytes, 4 values at 1 levels in buckets of 2 need 10"),
        (qsgd_frame([1.0, 1.0], bucket=0), "bucket size 0"),
        (qsgd_frame([1.0, 1.0], levels=0), "0 levels"),
        (qsgd_frame([1.0, 1.0], levels=2, q=3), "level 3 exceeds the 2 levels"),
    ],
)
def test_qsgd_frame_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def test_qsgd_decodes_a_hand_built_frame_per_bucket():
    out = decode_any(qsgd_frame([2.0, 6.0], levels=2, q=1))
    assert out.tolist() == [1.0, 1.0, 3.0, 3.0]


def qsgdz_frame(levels_stream: bytes, signs: bytes = b"", numel: int = 4, norms=(1.0, 1.0), length: int | None = None) -> bytes:
    """A qsgdz frame (levels 1, buckets of 2) around a given level stream and sign bytes."""
    head = struct.pack("<I", len(levels_stream) if length is None else length)
    return wire.build(12, numel, struct.pack("<BI", 1, 2), [np.asarray(norms, "<f4"), head, levels_stream, signs])


ONE_LEVEL = bitpack.pack(np.array([1, 0, 0, 0], np.uint8), 1).tobytes()


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (qsgdz_frame(zlib.compress(bytes(10**6))), "does not inflate to exactly the 1 bytes"),  # a zip bomb
        (qsgdz_frame(zlib.compress(ONE_LEVEL)[:-2], b"\x01"), "does not inflate to exactly"),  # cut short
        (qsgdz_frame(zlib.compress(ONE_LEVEL) + b"\x00", b""), "does not inflate to exactly"),  # bytes after its end
        (qsgdz_frame(b"not deflate", b"\x01"), "not valid deflate data"),
        (qsgdz_frame(zlib.compress(ONE_LEVEL), b"\x01", length=10**6), "overruns"),
        (qsgdz_frame(zlib.compress(ONE_LEVEL), b""), "0 sign bytes, 1 non-zero levels need 1"),
        (qsgdz_frame(zlib.compress(ONE_LEVEL), b"\x01\x00"), "2 sign bytes, 1 non-zero levels need 1"),
        (qsgdz_frame(zlib.compress(ONE_LEVEL), b"\x03"), "sign bits set past the last non-zero level"),
        (qsgdz_frame(zlib.compress(ONE_LEVEL), b"\x01", norms=(1.0, float("nan"))), "bucket norms must be finite"),
        (wire.build(12, 4, struct.pack("<BI", 1, 2), [np.ones(2, "<f4")]), "shorter than"),
    ],
)
def test_qsgdz_frame_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def test_qsgdz_decodes_a_hand_built_frame():
    # levels [1, 0, 0, 0] in buckets of 2 with norms 2 and 6, the one non-zero level negative
    frame = qsgdz_frame(zlib.compress(ONE_LEVEL), b"\x01", norms=(2.0, 6.0))
    assert decode_any(frame).tolist() == [-2.0, 0.0, 0.0, 0.0]


def minmax_frame(head, numel: int = 4, bits: int = 2, chunk: int = 2, q: int = 0, params: bytes | None = None) -> bytes:
    """A minmax frame with the given (min, scale) pairs per chunk and every level equal to q."""
    packed = bitpack.pack(np.full(numel, q, np.uint8), bits) if 1 <= bits <= 8 else b""
    params = struct.pack("<BI", bits, chunk) if params is None else params
    return wire.build(5, numel, params, [np.asarray(head, "<f4"), packed])


def with_padding_bit(frame: bytes) -> bytes:
    return frame[:-1] + bytes([frame[-1] | 0x80])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (minmax_frame([1.0, 0.5, float("nan"), 0.5]), "chunk minima must be finite"),
        (minmax_frame([1.0, 0.5, -(2.0**127), 0.0]), "chunk minima must be finite with magnitude"),
        (minmax_frame([1.0, 0.5, 0.0, float("inf")]), "scales must be finite"),
        (minmax_frame([1.0, float("nan"), 0.0, 1.0]), "scales must be finite"),
        (minmax_frame([1.0, -0.5, 0.0, 1.0]), "non-negative"),
        (minmax_frame([0.0, 2.0**127 / 3 * 1.001, 0.0, 1.0]), "<= 5.67137e\\+37"),
        (minmax_frame([1.0, 0.5]), "payload 9 bytes, 4 values of 2 bits in chunks of 2 need 17"),
        (minmax_frame([1.0, 0.5] * 2, chunk=1), "payload 17 bytes, 4 values of 2 bits in chunks of 1 need 33"),
        (minmax_frame([1.0, 0.5], chunk=0), "chunk size 0"),
        (minmax_frame([1.0, 0.5], bits=0), "0 bits in frame"),
        (minmax_frame([1.0, 0.5], bits=9), "9 bits in frame"),
        (with_padding_bit(minmax_frame([1.0, 0.5, 0.0, 1.0], numel=3, chunk=2)), "non-zero padding bits"),
        (minmax_frame([1.0, 0.5], params=b"\x02"), "1 parameter bytes, expected 5"),  # the former layout
        (minmax_frame([1.0, 0.5], params=struct.pack("<BI", 2, 2) + b"\0"), "6 parameter bytes, expected 5"),
    ],
)
def test_minmax_frame_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def test_minmax_decodes_a_hand_built_frame_per_chunk():
    out = decode_any(minmax_frame([1.0, 0.5, -4.0, 2.0, 7.0, 0.0], numel=5, q=3))
    assert out.tolist() == [2.5, 2.5, 2.0, 2.0, 7.0]
    widest = minmax_frame([-(2.0**126), np.float32(2.0**127 / 3)], numel=2, chunk=2, q=3)
    assert np.isfinite(decode_any(widest)).all()  # the largest scale an encoder makes still decodes


def test_expected_numel_is_checked_before_decoding():
    frame = get_codec("int8_sparse").encode(VEC)
    assert decode_any(frame, numel=10).size == 10
    with pytest.raises(CodecError, match="frame has 10 elements, expected 11"):
        get_codec("int8_sparse").decode(frame, numel=11)
    with pytest.raises(CodecError, match="codec id 4, expected 2"):
        get_codec("int8").decode(frame)


@pytest.mark.parametrize("name", ["int8", "int8_sparse", "fp32_sparse", "minmax4", "qsgd8"])
def test_error_feedback_conserves_the_sum(name):
    rng = np.random.default_rng(5)
    codec, ef = get_codec(name), ErrorFeedback()
    inputs = [rng.standard_normal(1000).astype(np.float32) for _ in range(20)]
    sent = np.zeros(1000, np.float64)
    for step, vec in enumerate(inputs):
        x = ef.compensate(vec)
        decoded = decode_any(codec.encode(x))
        ef.update(x, decoded)
        sent += decoded
        if step == 9:  # a checkpoint/restore mid-way must not lose the residual
            restored = ErrorFeedback()
            restored.load_state_dict(ef.state_dict())
            ef = restored
    total = np.sum(inputs, axis=0, dtype=np.float64)
    np.testing.assert_allclose(sent + ef.residual, total, atol=1e-4)
    assert np.abs(ef.residual).max() > 0  # the codec really was lossy


def error_feedback_residual_ratios(name: str, rounds: int = 10) -> list[float]:
    """||residual|| / ||delta|| after each round of error feedback on a stream of CNN-like model
    deltas (N(0, 1e-3)) with five large outliers (0.5) at random places, as an FL client sends them."""
    rng = np.random.default_rng(11)
    comp = build_compression(name, {}, layout=[])
    ratios = []
    for _ in range(rounds):
        delta = (rng.standard_normal(200_000) * 1e-3).astype(np.float32)
        delta[rng.choice(delta.size, 5, replace=False)] = 0.5
        comp.encode(delta)
        ratios.append(float(np.linalg.norm(comp.memory.residual) / np.linalg.norm(delta)))
    return ratios


def test_minmax2_error_feedback_residual_stays_bounded():
    # With one min and scale for the whole vector the outliers set a step of about 0.17 for every
    # value, and the residual grew every round (1.8x to 22x the delta norm over 10 rounds); per
    # chunk only the outliers' own chunks get the coarse step.
    ratios = error_feedback_residual_ratios("minmax2")
    assert max(ratios) < 3, ratios


def test_error_feedback_rejects_shape_change():
    ef = ErrorFeedback()
    ef.update(np.ones(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(CodecError, match="residual has shape"):
        ef.compensate(np.ones(4, np.float32))
