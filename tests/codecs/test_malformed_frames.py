"""Decoders facing untrusted bytes: every malformed frame of every codec raises CodecError and
nothing else, without huge allocations (dgc and powersgd frames: their own test files); the errors
each frame layout names."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.codecs import CodecError, bitpack, decode_any, get_codec, qsgdz, wire
from decode_checks import decode_only_codec_error

# COMMLAB_FUZZ_CASES: `make fuzz` runs 10,000 cases per test, `make test` a 1,000-case smoke.
FUZZ = settings(max_examples=int(os.environ.get("COMMLAB_FUZZ_CASES", "1000")))
# A numpy warning (overflow, invalid cast) inside a decoder means a silently wrong vector.
pytestmark = pytest.mark.filterwarnings("error")

CODECS = ["fp32", "int8", "fp32_sparse", "int8_sparse", "minmax3", "minmax8", "qsgd1", "qsgd16", "qsgdz3",
          "qsgdz255", "signsgd", "terngrad", "randomk"]
HEADER = wire.HEADER.size


def valid_frames() -> list[bytes]:
    rng = np.random.default_rng(3)
    frames = []
    for name in CODECS:
        params = {"seed": 0, "bucket": 32} if name.startswith("qsgd") else {}
        if "int8" in name or name.startswith("minmax"):
            params["chunk"] = 16
        for vec in (rng.standard_normal(100).astype(np.float32), np.zeros(3, np.float32), np.zeros(0, np.float32)):
            frames.append(get_codec(name, **params).encode(vec))
    # A bitmap-coded sparse frame too (dense selection makes the bitmap smaller than varints), several
    # block scales, and randomk's complement selection.
    frames.append(get_codec("fp32_sparse", ratio=0.9).encode(rng.standard_normal(200).astype(np.float32)))
    frames += [get_codec(name, block=16).encode(rng.standard_normal(100).astype(np.float32))
               for name in ("signsgd", "terngrad")]
    frames.append(get_codec("randomk", ratio=0.9).encode(rng.standard_normal(200).astype(np.float32)))
    frames.append(qsgdz_masks_frame(rng.standard_normal(100).astype(np.float32)))
    for frame in frames:  # each decoder compiled here, not inside a fuzz test's allocation count
        decode_any(frame)
    return frames


def qsgdz_masks_frame(vec: np.ndarray) -> bytes:
    """qsgdz3's MASKS frame of ``vec`` (buckets of 32), which its encoder sends for larger vectors only."""
    norms, q, negative = get_codec("qsgdz3", seed=0, bucket=32)._quantize(vec)
    params, parts, _ = qsgdz.LevelCodes(q, negative, vec.size, 3).masks()
    return wire.build(12, vec.size, qsgdz.QSGDZ.params_struct.pack(3, 32, qsgdz.MASKS, *params), [norms, *parts])


FRAMES = valid_frames()


@given(st.binary(max_size=200))
@FUZZ
def test_random_bytes(data):
    decode_only_codec_error(data)


@given(st.integers(0, 13), st.binary(max_size=120))  # every codec id in use and unknown ones
@FUZZ
def test_random_bytes_after_a_valid_header_prefix(codec_id, tail):
    head = wire.MAGIC + bytes([wire.VERSION, codec_id, wire.DTYPE_FLOAT32])
    decode_only_codec_error(head + tail)


@given(st.sampled_from(FRAMES), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6))
@FUZZ
def test_mutated_bytes(frame, edits):
    buf = bytearray(frame)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    decode_only_codec_error(bytes(buf))


@given(st.sampled_from(FRAMES), st.sampled_from([8, 16, HEADER, HEADER + 8]), st.integers(0, 2**64 - 1))
@FUZZ
def test_length_fields_overwritten(frame, offset, value):
    # Offsets 8, 16: numel, payload length; then the codec's parameters (chunk, bucket or block
    # sizes, index counts, randomk's seed and k).
    buf = bytearray(frame)
    if offset + 8 <= len(buf):
        struct.pack_into("<Q", buf, offset, value)
    decode_only_codec_error(bytes(buf))


@given(st.sampled_from(FRAMES), st.integers(0, 64), st.binary(max_size=16))
@FUZZ
def test_truncated_or_extended(frame, cut, extra):
    decode_only_codec_error(frame[: max(0, len(frame) - cut)] + extra)


@given(st.sampled_from(FRAMES))
@FUZZ
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


RICE, DENSE, VALUES, MASKS = 0, 1, 2, 3  # qsgdz's layouts


def qsgdz_frame(code: str, nonzero: int = 1, levels: int = 1, k: tuple = (0, 0, 0), numel: int = 4,
                norms=(1.0, 1.0), tail: bytes = b"", layout: int = RICE) -> bytes:
    """A qsgdz frame (buckets of 2) around a level stream given as its bits, first bit first
    (spaces between codes), then ``tail``."""
    bits = np.array([int(b) for b in code.replace(" ", "")], np.uint8)
    stream = np.packbits(bits, bitorder="little").tobytes() + tail
    params = struct.pack("<BIBIBBB", levels, 2, layout, nonzero, *k)
    return wire.build(12, numel, params, [np.asarray(norms, "<f4"), stream])


def qsgdz_values(code: str, nonzero: int = 1, levels: int = 1, k: int = 0, **fields) -> bytes:
    """A qsgdz VALUES frame (buckets of 2) around a stream given as its bits, as qsgdz_frame."""
    return qsgdz_frame(code, nonzero, levels, (0, 0, k), layout=VALUES, **fields)


def qsgdz_dense(q=(1, 0, 0, 0), signs: int = 1, levels: int = 1, norms=(1.0, 1.0), layout: int = DENSE,
                params: tuple = (0, 0, 0, 0), packed: bytes | None = None, tail: bytes = b"") -> bytes:
    """A qsgdz DENSE frame (buckets of 2): the levels ``q`` bit-packed (or ``packed``), the sign
    bitmap's one byte, then ``tail``."""
    if packed is None:
        packed = bitpack.pack(np.asarray(q, np.uint8), levels.bit_length()).tobytes()
    head = struct.pack("<BIBIBBB", levels, 2, layout, *params)
    return wire.build(12, len(q), head, [np.asarray(norms, "<f4"), bytes([signs]), packed, tail])


def qsgdz_masks(code: str, lengths: dict, signs: bytes = b"\x01", nonzero: int = 1, levels: int = 1,
                k: tuple = (0, 0, 0), numel: int = 4, norms=(1.0, 1.0), tail: bytes = b"") -> bytes:
    """A qsgdz MASKS frame (buckets of 2): the code lengths ``lengths`` (byte: bits), the sign
    bytes, then a stream given as its bits as qsgdz_frame's."""
    table = np.zeros(256, np.uint8)
    for symbol, length in lengths.items():
        table[symbol] = length
    packed = (table[0::2] | (table[1::2] << 4)).astype(np.uint8).tobytes()
    bits = np.array([int(b) for b in code.replace(" ", "")], np.uint8)
    stream = np.packbits(bits, bitorder="little").tobytes() + tail
    params = struct.pack("<BIBIBBB", levels, 2, MASKS, nonzero, *k)
    return wire.build(12, numel, params, [np.asarray(norms, "<f4"), packed, signs, stream])


# Levels [1, 0, 0, 0], the level negative, as a MASKS frame: the bitmap's one byte, 1, has the
# one code of a single byte, "0"; then one level 1 before any level above 1 ("01").
ONE_MASK = "0 01"


# Rice codes with k = 0: n zeros then a one. Levels [1, 0, 0, 0], the level negative: one level 1
# before any level above 1 ("01"), then the level: no zeros before it ("1"), its sign ("1").
ONE_LEVEL = "01 1 1"
# The same levels per value, k = 0: level 1 ("01"), its sign ("1"), three levels 0 ("1", no sign).
ONE_VALUE = "01 1 1 1 1"


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (qsgdz_frame(ONE_LEVEL, nonzero=2), "ends before its 2 non-zero levels"),
        (qsgdz_frame("", nonzero=0), "ends before its 0 non-zero levels"),
        # a code that never ends: zeros to the stream's end, fewer than the 10,000 values allow
        (qsgdz_frame("01 " + "0" * 800, numel=10_000, norms=np.ones(5000)), "ends before its 1 non-zero levels"),
        (qsgdz_frame("0" * 800), "a run of levels 1 overruns the 1 non-zero levels"),
        (qsgdz_frame("01 00001 0"), "a run of zero levels overruns the 4 values"),
        (qsgdz_frame("01 0001 0 1 0", nonzero=2), "a run of zero levels overruns the 4 values"),
        # k_gap 31: 200 zeros would make a quotient of 200 * 2**31, refused before it is shifted.
        (qsgdz_frame("01 " + "0" * 200 + "1" + "0" * 31 + "0", k=(31, 0, 0)), "a run of zero levels overruns"),
        (qsgdz_frame("1 1 0 1"), "a level above the 1 levels"),  # level 2 in a 1-level frame
        (qsgdz_frame("1 1 0 001 1", levels=3), "a level above the 3 levels"),  # level 4
        (qsgdz_frame("001 1 0"), "a run of levels 1 overruns the 1 non-zero levels"),
        (qsgdz_frame("1 1 0 1 01", levels=3), "a run of levels 1 overruns the 1 non-zero levels"),
        (qsgdz_frame(ONE_LEVEL, tail=b"\x00"), "level stream of 2 bytes, its codes end in byte 1"),
        (qsgdz_frame(ONE_LEVEL + " 0001"), "non-zero padding bits"),
        (qsgdz_frame(ONE_LEVEL, nonzero=5), "5 non-zero levels for only 4 values"),
        (qsgdz_frame(ONE_LEVEL, k=(0, 32, 0)), "Rice parameters"),
        (qsgdz_frame(ONE_LEVEL, norms=(1.0, float("nan"))), "bucket norms must be finite"),
        (wire.build(12, 4, struct.pack("<BIBIBBB", 1, 2, RICE, 1, 0, 0, 0), [np.ones(1, "<f4")]), "shorter than"),
        (wire.build(12, 4, struct.pack("<BIBIBBB", 0, 2, RICE, 1, 0, 0, 0), [np.ones(2, "<f4")]), "0 levels"),
        (qsgdz_dense(layout=4), "layout 4, not 0 \\(Rice runs\\), 1 \\(dense\\), 2 \\(Rice values\\) or 3 "
                                "\\(coded bitmap\\)"),
        (qsgdz_dense(layout=255), "layout 255"),
        (qsgdz_dense(params=(1, 0, 0, 0)), "dense frame with Rice parameters"),
        (qsgdz_dense(params=(0, 0, 0, 3)), "dense frame with Rice parameters"),
        (qsgdz_dense(tail=b"\x00"), "payload 11 bytes, 4 values at 1 levels in buckets of 2 need 10"),
        (qsgdz_dense(packed=b""), "payload 9 bytes, 4 values at 1 levels in buckets of 2 need 10"),
        # 9 values: five norms and two sign bytes, not two and one
        (qsgdz_dense(q=(1, 0, 0, 0, 0, 0, 0, 0, 0)), "payload 11 bytes, 9 values at 1 levels in buckets of 2 need 24"),
        (qsgdz_dense(q=(3, 0, 0, 0), levels=2), "level 3 exceeds the 2 levels"),
        (qsgdz_dense(packed=b"\x81"), "non-zero padding bits"),
        (qsgdz_dense(signs=0x11), "sign: bitmap has bits set past the end"),
        (qsgdz_dense(norms=(1.0, -1.0)), "non-negative"),
        # a DENSE payload under RICE parameters: the sign byte 1 is the code of a run of no levels 1,
        # then the stream ends
        (qsgdz_dense(packed=b"", layout=RICE, params=(1, 0, 0, 0)), "level stream ends before its 1 non-zero levels"),
        (qsgdz_values("01 1 1"), "level stream ends before its 4 values"),
        (qsgdz_values(""), "level stream ends before its 4 values"),
        # a code that never ends: zeros to the stream's end, fewer than a level up to 255 allows
        (qsgdz_values("0" * 100, levels=255), "level stream ends before its 4 values"),
        # more of them than that: a level above 255, refused before the quotient is shifted
        (qsgdz_values("0" * 800, levels=255), "a level above the 255 levels"),
        (qsgdz_values("001 1 1 1 1"), "a level above the 1 levels"),  # level 2 in a 1-level frame
        (qsgdz_values(ONE_VALUE, nonzero=2), "level stream has 1 non-zero levels, the header 2"),
        (qsgdz_values("1 1 1 1", nonzero=1), "level stream has 0 non-zero levels, the header 1"),
        (qsgdz_values(ONE_VALUE, nonzero=5), "5 non-zero levels for only 4 values"),
        (qsgdz_values(ONE_VALUE, tail=b"\x00"), "level stream of 2 bytes, its codes end in byte 1"),
        (qsgdz_values(ONE_VALUE + " 1"), "non-zero padding bits"),
        (qsgdz_values(ONE_VALUE, k=8), "per-value Rice parameter 8 above 7"),
        (qsgdz_frame(ONE_VALUE, k=(1, 0, 0), layout=VALUES), "per-value frame with k_gap, k_run \\(1, 0\\), not zeros"),
        (qsgdz_frame(ONE_VALUE, k=(0, 2, 0), layout=VALUES), "per-value frame with k_gap, k_run \\(0, 2\\), not zeros"),
        (qsgdz_values(ONE_VALUE, norms=(1.0, float("inf"))), "bucket norms must be finite"),
        (qsgdz_masks(ONE_MASK, {1: 1}, k=(1, 0, 0)), "bitmap frame with Rice parameters \\(1, 0, 0\\)"),
        (qsgdz_masks(ONE_MASK, {1: 1}, k=(0, 32, 0)), "bitmap frame with Rice parameters"),
        (qsgdz_masks(ONE_MASK, {1: 1}, nonzero=5), "5 non-zero levels for only 4 values"),
        (qsgdz_masks("", {1: 1}, signs=b"", nonzero=3), "shorter than the 137 bytes of bucket norms, code "
                                                          "lengths and 3 sign bits"),
        (qsgdz_masks(ONE_MASK, {0: 1, 1: 1, 2: 1}), "code lengths that are no prefix code"),
        (qsgdz_masks(ONE_MASK, {1: 13}), "a code length above 12 bits"),
        (qsgdz_masks(ONE_MASK, {1: 1}, signs=b"\x03"), "sign bits have non-zero padding bits"),
        # 80 values: 10 bitmap bytes, their codes past the stream's 8 bits (zeros: the code "0")
        (qsgdz_masks("0", {1: 1}, numel=80, norms=np.ones(40)), "stream ends before its 10 bitmap bytes"),
        (qsgdz_masks("1 01", {1: 2}), "bitmap stream holds bits that are no code"),  # only "00" is a code
        (qsgdz_masks(ONE_MASK, {16: 1}), "bitmap has bits set past the end of the vector"),
        (qsgdz_masks(ONE_MASK, {1: 1}, nonzero=2), "bitmap has 1 non-zero levels, the header 2"),
        (qsgdz_masks("0 1 1", {1: 1}), "a level above the 1 levels"),  # no level 1, then level 2
        (qsgdz_masks("0 001", {1: 1}), "a run of levels 1 overruns the 1 non-zero levels"),
        (qsgdz_masks("0", {1: 1}), "stream ends before its levels above 1"),
        (qsgdz_masks(ONE_MASK, {1: 1}, tail=b"\x00"), "level stream of 2 bytes, its codes end in byte 1"),
        (qsgdz_masks(ONE_MASK + " 1", {1: 1}), "non-zero padding bits"),
        (qsgdz_masks(ONE_MASK, {1: 1}, norms=(1.0, float("nan"))), "bucket norms must be finite"),
    ],
)
def test_qsgdz_frame_errors(frame, message):
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        # buckets of 2 with norms 2 and 6 at 1 level: steps 2 and 6
        (qsgdz_frame(ONE_LEVEL, norms=(2.0, 6.0)), [-2.0, 0.0, 0.0, 0.0]),
        # at 3 levels, steps 1: level 3 (no level 1 before it; 3 - 2 = 1; one level 1 after it), then
        # two zeros and a negative level 1
        (qsgdz_frame("1 1 0 01 01 001 1", nonzero=2, levels=3, norms=(3.0, 3.0)), [3.0, 0.0, 0.0, -1.0]),
        (qsgdz_frame("1", nonzero=0), [0.0, 0.0, 0.0, 0.0]),
        # DENSE at 2 levels, steps 1 and 3: levels 1, 0, 2, 0, the third negative
        (qsgdz_dense(q=(1, 0, 2, 0), signs=0b0100, levels=2, norms=(2.0, 6.0)), [1.0, 0.0, -6.0, 0.0]),
        (qsgdz_values(ONE_VALUE, norms=(2.0, 6.0)), [-2.0, 0.0, 0.0, 0.0]),
        # VALUES at 3 levels, k 1, steps 1: level 3 ("01", low bit "1", sign "0"), two levels 0
        # ("1", low bit "0"), a negative level 1 ("1", low bit "1", sign "1")
        (qsgdz_values("011 0 10 10 11 1", nonzero=2, levels=3, k=1, norms=(3.0, 3.0)), [3.0, 0.0, 0.0, -1.0]),
        (qsgdz_values("1 1 1 1", nonzero=0), [0.0, 0.0, 0.0, 0.0]),
        (qsgdz_values("", nonzero=0, numel=0, norms=()), []),
        (qsgdz_masks(ONE_MASK, {1: 1}, norms=(2.0, 6.0)), [-2.0, 0.0, 0.0, 0.0]),
        # at 3 levels, steps 1: the bitmap byte 0b1001 (its code "0"); no level 1 before the level
        # 3 ("1"), 3 - 2 = 1 ("01"), one level 1 after it ("01"); the second level negative
        (qsgdz_masks("0 1 01 01", {9: 1}, signs=b"\x02", nonzero=2, levels=3, norms=(3.0, 3.0)),
         [3.0, 0.0, 0.0, -1.0]),
        # two bitmap bytes (9 values, buckets of 2), codes "0" (byte 0) and "1" (byte 0b10000)
        (qsgdz_masks("1 0 01", {0: 1, 16: 1}, signs=b"\x00", numel=9, norms=(1.0,) * 5),
         [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_qsgdz_decodes_hand_built_frames(frame, expected):
    assert decode_any(frame).tolist() == expected


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


VEC20 = np.random.default_rng(5).standard_normal(20).astype(np.float32)


def build(codec_id: int, numel: int, params: bytes, payload: bytes) -> bytes:
    return wire.build(codec_id, numel, params, [payload])


def scaled(scale: float, bitmaps: bytes) -> bytes:
    return struct.pack("<f", scale) + bitmaps


B = struct.pack("<I", 1024)  # one block for the 20-value frames below


def blocked(block: int, scales: list[float], bitmaps: bytes) -> tuple[bytes, bytes]:
    return struct.pack("<I", block), struct.pack(f"<{len(scales)}f", *scales) + bitmaps


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (get_codec("signsgd").encode(VEC20)[:-1], "truncated"),
        (get_codec("terngrad").encode(VEC20)[:-1], "truncated"),
        (get_codec("randomk").encode(VEC20)[:-1], "truncated"),
        (build(7, 20, B, scaled(1.0, bytes(2))), "payload 6 bytes, 20 signs in blocks of 1024 need 7"),
        (build(7, 20, B, scaled(1.0, bytes(4))), "payload 8 bytes"),
        (build(7, 20, B, scaled(float("nan"), bytes(3))), "scale nan must be finite"),
        (build(7, 20, B, scaled(float("inf"), bytes(3))), "scale inf"),
        (build(7, 20, B, scaled(-1.0, bytes(3))), "non-negative"),
        (build(7, 20, B, scaled(2.0**127, bytes(3))), "<= 8.50706e\\+37"),
        (build(7, 20, B, scaled(1.0, bytes([0, 0, 0x10]))), "bits set past the end"),
        (build(7, 20, *blocked(8, [1.0, 2.0, float("nan")], bytes(3))), "scale nan"),  # the last block's
        (build(7, 20, *blocked(8, [1.0, 2.0], bytes(3))), "payload 11 bytes, 20 signs in blocks of 8 need 15"),
        (build(7, 20, *blocked(0, [1.0], bytes(3))), "block size must be an integer in 1..2147483648, got 0"),
        (build(7, 20, *blocked(2**32 - 1, [1.0], bytes(3))), "block size must be an integer"),
        (build(7, 0, B, scaled(1.0, b"")), "payload 4 bytes, 0 signs in blocks of 1024 need 0"),
        (build(7, 4, b"\0", scaled(1.0, bytes(1))), "1 parameter bytes, expected 4"),
        (build(7, 4, b"", scaled(1.0, bytes(1))), "0 parameter bytes, expected 4"),
        (build(8, 20, B, scaled(1.0, bytes(3))), "payload 7 bytes, 20 values in blocks of 1024 need 10"),
        (build(8, 20, B, scaled(-2.0, bytes(6))), "non-negative"),
        (build(8, 20, *blocked(16, [1.0, -2.0], bytes(6))), "scale -2.0 must be finite"),
        (build(8, 20, *blocked(0, [], bytes(6))), "block size must be"),
        (build(8, 20, *blocked(2**31 + 1, [1.0], bytes(6))), "block size must be"),
        (build(8, 20, B, scaled(1.0, bytes([0, 0, 0, 0, 0, 0x20]))), "bits set past the end"),
        (build(8, 20, B, scaled(1.0, bytes([0, 0, 0x10, 0, 0, 0]))), "bits set past the end"),
        (build(8, 20, B, scaled(1.0, bytes([1, 0, 0, 2, 0, 0]))), "sign bit set on a zero value"),
        (build(9, 20, struct.pack("<QQ", 1, 21), bytes(84)), "21 kept values for only 20"),
        (build(9, 20, struct.pack("<QQ", 1, 2**64 - 1), bytes(8)), "kept values for only 20"),
        (build(9, 20, struct.pack("<QQ", 1, 2), bytes(12)), "payload 12 bytes, 2 float32 values need 8"),
        (build(9, 20, struct.pack("<QQ", 1, 2), bytes(4)), "payload 4 bytes"),
        (build(9, 20, struct.pack("<Q", 1), bytes(8)), "8 parameter bytes, expected 16"),
        (build(9, 2**31, struct.pack("<QQ", 1, 1), bytes(4)), None),  # valid, but needs numel=2**31
    ],
)
def test_signsgd_terngrad_randomk_frame_errors(frame, message):
    if message is None:
        with pytest.raises(CodecError, match="frame has 2147483648 elements, expected 20"):
            decode_any(frame, numel=20)
        return
    with pytest.raises(CodecError, match=message):
        decode_any(frame)


def test_signsgd_terngrad_decode_hand_built_frames():
    assert decode_any(build(7, 3, B, scaled(2.0, bytes([0b101])))).tolist() == [-2, 2, -2]
    assert decode_any(build(8, 3, B, scaled(2.0, bytes([0b110, 0b100])))).tolist() == [0, 2, -2]
    # Blocks of 2: scales 2 and 0.5 (the last block is shorter); a huge block is one scale.
    assert decode_any(build(7, 3, *blocked(2, [2.0, 0.5], bytes([0b101])))).tolist() == [-2, 2, -0.5]
    assert decode_any(build(8, 3, *blocked(2, [2.0, 0.5], bytes([0b110, 0b100])))).tolist() == [0, 2, -0.5]
    assert decode_any(build(7, 3, *blocked(2**31, [1.0], bytes([0b010])))).tolist() == [1, -1, 1]
    assert decode_any(build(7, 0, B, b"")).size == 0
